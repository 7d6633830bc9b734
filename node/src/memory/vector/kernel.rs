//! The distance kernel: HNSW builds and exact scans spend nearly all their time here.
//!
//! The workspace denies `unsafe`, so there are no intrinsics: the loops are shaped so that the
//! compiler vectorises them on its own. Floating-point addition is not associative, so a single
//! running sum would force one add at a time; [`LANES`] independent partial sums over fixed-size
//! chunks let the compiler keep them in vector registers (four SSE registers on the x86-64
//! baseline, two AVX registers with `-C target-cpu=native`), with no bounds checks in the loop.

/// Independent partial sums per step: enough to fill the vector units and hide add latency.
const LANES: usize = 16;

/// Dot product of the common prefix of `a` and `b`; for unit vectors it is their cosine similarity.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a_chunks, a_rest) = a[..n].as_chunks::<LANES>();
    let (b_chunks, b_rest) = b[..n].as_chunks::<LANES>();
    let mut acc = [0.0f32; LANES];
    for (x, y) in a_chunks.iter().zip(b_chunks) {
        for lane in 0..LANES {
            acc[lane] += x[lane] * y[lane];
        }
    }
    let mut rest = 0.0f32;
    for (x, y) in a_rest.iter().zip(b_rest) {
        rest += x * y;
    }
    reduce(acc) + rest
}

/// Pairwise sum of the partial sums: shorter dependency chains and smaller rounding error.
#[inline]
fn reduce(acc: [f32; LANES]) -> f32 {
    let mut half = [0.0f32; LANES / 2];
    for (i, h) in half.iter_mut().enumerate() {
        *h = acc[i] + acc[i + LANES / 2];
    }
    let mut quarter = [0.0f32; LANES / 4];
    for (i, q) in quarter.iter_mut().enumerate() {
        *q = half[i] + half[i + LANES / 4];
    }
    (quarter[0] + quarter[2]) + (quarter[1] + quarter[3])
}

/// `v` scaled to unit length, so that a dot product is a cosine; `None` when `v` is zero or holds
/// a non-finite value, since neither has a direction.
pub fn normalised(v: &[f32]) -> Option<Vec<f32>> {
    if v.iter().any(|x| !x.is_finite()) {
        return None;
    }
    // Summing in f64 keeps huge or tiny components from overflowing or vanishing.
    let norm = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
    if !(norm.is_finite() && norm > 0.0) {
        return None;
    }
    let unit: Vec<f32> = v.iter().map(|&x| (f64::from(x) / norm) as f32).collect();
    unit.iter().any(|&x| x != 0.0).then_some(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference: one sum, in f64, in order.
    fn naive(a: &[f32], b: &[f32]) -> f64 {
        a.iter().zip(b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum()
    }

    /// A fixed-seed xorshift so failures reproduce.
    fn vector(seed: &mut u64, len: usize) -> Vec<f32> {
        (0..len)
            .map(|_| {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn dot_matches_naive_sum_on_random_384_d_vectors() {
        let mut seed = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..200 {
            let a = vector(&mut seed, 384);
            let b = vector(&mut seed, 384);
            let want = naive(&a, &b);
            let got = f64::from(dot(&a, &b));
            assert!((got - want).abs() < 1e-4, "got {got}, want {want}");
        }
    }

    #[test]
    fn dot_handles_lengths_that_are_not_a_multiple_of_the_chunk() {
        let mut seed = 42;
        for len in [0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 100, 383, 385, 1000] {
            let a = vector(&mut seed, len);
            let b = vector(&mut seed, len);
            let want = naive(&a, &b);
            let got = f64::from(dot(&a, &b));
            assert!((got - want).abs() < 1e-4, "len {len}: got {got}, want {want}");
        }
    }

    #[test]
    fn dot_of_a_unit_vector_with_itself_is_one() {
        let mut seed = 7;
        let a = normalised(&vector(&mut seed, 384)).expect("non-zero");
        assert!((dot(&a, &a) - 1.0).abs() < 1e-5);
    }

    #[test]
    fn normalised_refuses_zero_and_non_finite_vectors() {
        assert_eq!(normalised(&[0.0; 8]), None);
        assert_eq!(normalised(&[1.0, f32::NAN]), None);
        assert_eq!(normalised(&[1.0, f32::INFINITY]), None);
        let big = normalised(&[f32::MAX, f32::MAX]).expect("finite");
        assert!((dot(&big, &big) - 1.0).abs() < 1e-5);
    }
}
