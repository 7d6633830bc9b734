#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

use super::pca::{self, Projection};
use super::{cut, most_common_dim};

/// Rows in 8 dimensions: a wide spread along axis 3, a narrower one along axis 5, and a
/// little fixed jitter everywhere else.
fn rows_along_axes(n: usize) -> Vec<Vec<f32>> {
    (0..n)
        .map(|i| {
            let t = i as f32 / n as f32 - 0.5;
            let mut row: Vec<f32> = (0..8).map(|d| ((i * 7 + d * 13) % 11) as f32 * 0.002).collect();
            row[3] += 10.0 * t;
            row[5] += 3.0 * ((i % 5) as f32 - 2.0) / 2.0;
            row
        })
        .collect()
}

fn correlation(a: &[f32], b: &[f32]) -> f64 {
    let n = a.len() as f64;
    let mean = |v: &[f32]| v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
    let (ma, mb) = (mean(a), mean(b));
    let (mut ab, mut aa, mut bb) = (0.0, 0.0, 0.0);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x) - ma, f64::from(y) - mb);
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    ab / (aa * bb).sqrt()
}

fn project(rows: &[Vec<f32>]) -> Projection {
    let refs: Vec<&[f32]> = rows.iter().map(Vec::as_slice).collect();
    pca::project(&refs, rows.first().map_or(0, Vec::len))
}

#[test]
fn the_widest_spread_lands_on_the_first_component_and_the_next_on_the_second() {
    let rows = rows_along_axes(300);
    let projection = project(&rows);
    let [first, second] = &projection.components;
    assert!(first[3] > 0.999, "first component is axis 3: {first:?}");
    assert!(second[5] > 0.999, "second component is axis 5: {second:?}");
    // x follows the coordinate along axis 3, y the one along axis 5.
    let xs: Vec<f32> = projection.points.iter().map(|p| p[0]).collect();
    let ys: Vec<f32> = projection.points.iter().map(|p| p[1]).collect();
    let along = |d: usize| rows.iter().map(|r| r[d]).collect::<Vec<f32>>();
    assert!(correlation(&xs, &along(3)) > 0.999, "x follows axis 3");
    assert!(correlation(&ys, &along(5)) > 0.999, "y follows axis 5");
    let span = xs.iter().fold(f32::MIN, |m, &x| m.max(x)) - xs.iter().fold(f32::MAX, |m, &x| m.min(x));
    assert!((span - 10.0).abs() < 0.3, "x spans axis 3's range, in its units: {span}");
    let [a, b] = projection.explained;
    assert!(a > b && b > 0.0 && a + b <= 1.0 + 1e-9, "explained {a} {b}");
    // Axis 3 has variance 100/12, axis 5 has 4.5: their shares of the whole.
    assert!((a - 0.648).abs() < 0.01 && (b - 0.350).abs() < 0.01, "shares of the variance: {a} {b}");
}

#[test]
fn the_same_embeddings_always_land_on_the_same_points() {
    let rows = rows_along_axes(200);
    assert_eq!(project(&rows), project(&rows));
}

#[test]
fn components_are_sign_normalised_so_mirrored_data_gives_the_same_axes() {
    let rows = rows_along_axes(200);
    let mirrored: Vec<Vec<f32>> = rows.iter().map(|r| r.iter().map(|x| -x).collect()).collect();
    let (a, b) = (project(&rows), project(&mirrored));
    for (ca, cb) in a.components.iter().zip(&b.components) {
        for (x, y) in ca.iter().zip(cb) {
            assert!((x - y).abs() < 1e-6, "components differ: {ca:?} vs {cb:?}");
        }
    }
    for (p, q) in a.points.iter().zip(&b.points) {
        assert!((p[0] + q[0]).abs() < 1e-4 && (p[1] + q[1]).abs() < 1e-4, "mirrored points: {p:?} {q:?}");
    }
}

#[test]
fn empty_and_one_crystal_stores_project_without_failing() {
    let empty = project(&[]);
    assert!(empty.points.is_empty());
    let one = project(&[vec![0.3, -0.2, 0.9]]);
    assert_eq!(one.points, vec![[0.0, 0.0]]);
    let same = project(&[vec![1.0, 2.0], vec![1.0, 2.0], vec![1.0, 2.0]]);
    assert_eq!(same.points, vec![[0.0, 0.0]; 3], "rows that do not vary sit at the origin");
    assert_eq!(same.explained, [0.0, 0.0]);
}

#[test]
fn points_on_one_line_have_no_second_axis_and_no_nan() {
    let rows: Vec<Vec<f32>> = (0..50).map(|i| vec![i as f32, 2.0 * i as f32, 0.0]).collect();
    let projection = project(&rows);
    assert!(projection.points.iter().all(|p| p[0].is_finite() && p[1].is_finite()));
    assert!(projection.points.iter().all(|p| p[1].abs() < 1e-3), "no spread off the line");
    assert!(projection.explained[0] > 0.999);
    let xs: Vec<f32> = projection.points.iter().map(|p| p[0]).collect();
    assert!(xs.windows(2).all(|w| w[0] < w[1]), "order along the line kept");
}

#[test]
fn rows_of_the_wrong_length_are_not_projected() {
    let refs: Vec<&[f32]> = vec![&[1.0, 2.0], &[3.0]];
    assert_eq!(pca::project(&refs, 2).points, vec![[0.0, 0.0]; 2]);
}

#[test]
fn texts_are_cut_on_character_boundaries() {
    assert_eq!(cut("short", 10), ("short".to_owned(), false));
    assert_eq!(cut("ünïcødé text", 4), ("ünïc…".to_owned(), true));
    assert_eq!(cut("exactly", 7), ("exactly".to_owned(), false));
}

#[test]
fn the_map_uses_the_dimension_most_embeddings_have() {
    let e = |d: usize| Some(vec![0.0f32; d]);
    assert_eq!(most_common_dim(&[e(384), e(256), e(384), None]), 384);
    assert_eq!(most_common_dim(&[None]), 0);
}
