//! The top two principal components of a set of embeddings, by block power iteration (subspace
//! iteration with a Rayleigh–Ritz step), so the `/memory` page can lay crystals out on a plane
//! where the widest spread of meaning runs along x and the next along y.
//!
//! Deterministic: the starting block comes from a fixed seed, every sum runs in one order, and
//! each component's sign is fixed (its largest coordinate is positive), so the same embeddings
//! always land on the same points.

/// Iterations at most; the subspace usually settles in far fewer.
const MAX_ITERATIONS: usize = 200;

/// The subspace has settled when no vector of the new pair lies outside the old span by more
/// than this (1 − its squared projection onto it).
const TOLERANCE: f64 = 1e-10;

/// The seed of the starting block.
const SEED: u64 = 0x6472_7573_655f_7063; // "druse_pc"

/// Where each embedding lands, and how much of the spread each axis shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Projection {
    /// One `[x, y]` per input row, in input order.
    pub points: Vec<[f32; 2]>,
    /// The share of the total variance along each axis, in [0, 1] (0 for an axis with none).
    pub explained: [f64; 2],
    /// The two unit components (empty when there was nothing to project).
    pub components: [Vec<f64>; 2],
    /// Iterations run.
    pub iterations: usize,
}

/// Projects `rows` (each of length `dim`) onto their top two principal components. Fewer than
/// two rows, or rows that do not vary, land at the origin.
pub fn project(rows: &[&[f32]], dim: usize) -> Projection {
    let n = rows.len();
    let empty = Projection {
        points: vec![[0.0, 0.0]; n],
        explained: [0.0, 0.0],
        components: [Vec::new(), Vec::new()],
        iterations: 0,
    };
    if n < 2 || dim == 0 || rows.iter().any(|r| r.len() != dim) {
        return empty;
    }
    // Centre the rows once: every product below reads them.
    let mut mean = vec![0.0f64; dim];
    for row in rows {
        for (m, &x) in mean.iter_mut().zip(*row) {
            *m += f64::from(x);
        }
    }
    for m in &mut mean {
        *m /= n as f64;
    }
    let centred: Vec<f64> = rows.iter().flat_map(|row| row.iter().zip(&mean).map(|(&x, m)| f64::from(x) - m)).collect();
    let total_variance = centred.iter().map(|x| x * x).sum::<f64>() / n as f64;
    if total_variance <= f64::EPSILON {
        return empty;
    }
    let data = Centred { values: &centred, n, dim };

    let mut rng = SplitMix(SEED);
    let mut q = [(0..dim).map(|_| rng.unit()).collect::<Vec<f64>>(), (0..dim).map(|_| rng.unit()).collect()];
    orthonormalise(&mut q);
    let mut iterations = 0;
    for _ in 0..MAX_ITERATIONS {
        iterations += 1;
        let mut next = data.covariance_times(&q);
        orthonormalise(&mut next);
        // How far each new vector lies outside the old span: 0 once the span has settled.
        let moved = next.iter().map(|v| 1.0 - (dot(v, &q[0]).powi(2) + dot(v, &q[1]).powi(2))).fold(0.0, f64::max);
        q = next;
        if moved < TOLERANCE {
            break;
        }
    }
    let (mut q, eigen) = rayleigh_ritz(&data, q);
    for component in &mut q {
        fix_sign(component);
    }
    let points = (0..n)
        .map(|i| {
            let row = data.row(i);
            [dot(row, &q[0]) as f32, dot(row, &q[1]) as f32]
        })
        .collect();
    let explained = eigen.map(|e| (e / total_variance).clamp(0.0, 1.0));
    Projection { points, explained, components: q, iterations }
}

/// The centred rows, read as the covariance matrix without forming it.
struct Centred<'a> {
    values: &'a [f64],
    n: usize,
    dim: usize,
}

impl Centred<'_> {
    fn row(&self, i: usize) -> &[f64] {
        &self.values[i * self.dim..(i + 1) * self.dim]
    }

    /// `C v` for both vectors of a pair, with `C = Xᵀ X / n`, as `Xᵀ (X v) / n`: one pass over
    /// the rows, no d × d matrix.
    fn covariance_times(&self, v: &[Vec<f64>; 2]) -> [Vec<f64>; 2] {
        let mut out = [vec![0.0; self.dim], vec![0.0; self.dim]];
        for i in 0..self.n {
            let row = self.row(i);
            let (a, b) = (dot(row, &v[0]), dot(row, &v[1]));
            let [first, second] = &mut out;
            for ((f, s), x) in first.iter_mut().zip(second.iter_mut()).zip(row) {
                *f += a * x;
                *s += b * x;
            }
        }
        for o in out.iter_mut().flatten() {
            *o /= self.n as f64;
        }
        out
    }
}

/// Rotates an orthonormal pair inside its span to the eigenvectors of the covariance restricted
/// to it, larger eigenvalue first; returns the pair and the two eigenvalues.
fn rayleigh_ritz(data: &Centred<'_>, q: [Vec<f64>; 2]) -> ([Vec<f64>; 2], [f64; 2]) {
    let [c0, c1] = data.covariance_times(&q);
    let (a, b, d) = (dot(&q[0], &c0), dot(&q[0], &c1), dot(&q[1], &c1));
    // The 2 × 2 symmetric [[a, b], [b, d]]: its eigenvalues and the rotation angle.
    let mid = (a + d) / 2.0;
    let radius = (((a - d) / 2.0).powi(2) + b * b).sqrt();
    let values = [(mid + radius).max(0.0), (mid - radius).max(0.0)];
    let theta = 0.5 * (2.0 * b).atan2(a - d);
    let (sin, cos) = theta.sin_cos();
    let first: Vec<f64> = q[0].iter().zip(&q[1]).map(|(x, y)| cos * x + sin * y).collect();
    let second: Vec<f64> = q[0].iter().zip(&q[1]).map(|(x, y)| -sin * x + cos * y).collect();
    ([first, second], values)
}

/// Gram–Schmidt on a pair; a vector with nothing left of it becomes zero.
fn orthonormalise(q: &mut [Vec<f64>; 2]) {
    normalise(&mut q[0]);
    let along = dot(&q[0], &q[1]);
    let [first, second] = q;
    for (s, f) in second.iter_mut().zip(first.iter()) {
        *s -= along * f;
    }
    normalise(&mut q[1]);
}

fn normalise(v: &mut [f64]) {
    let length = norm(v);
    if length > 1e-12 {
        for x in v.iter_mut() {
            *x /= length;
        }
    } else {
        v.iter_mut().for_each(|x| *x = 0.0);
    }
}

/// Makes the largest coordinate (by magnitude; the first among equals) positive.
fn fix_sign(v: &mut [f64]) {
    let mut largest = 0.0f64;
    for &x in v.iter() {
        if x.abs() > largest.abs() {
            largest = x;
        }
    }
    if largest < 0.0 {
        v.iter_mut().for_each(|x| *x = -*x);
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn norm(v: &[f64]) -> f64 {
    dot(v, v).sqrt()
}

/// SplitMix64: a fixed, dependency-free stream for the starting block.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in [-1, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}
