//! The arithmetic of the encoder: a linear layer whose weights are packed once, when the model
//! loads, for the products a sentence embedding makes (a question is a dozen rows, a batch of
//! turns a thousand), and the element-wise steps (GELU, the exponent of softmax) in forms that
//! run as vector instructions.
//!
//! A product `y = x · Wᵀ + b` walks the weights in panels of 16 output columns: each panel holds,
//! for every input, the 16 weights that input feeds, side by side (one cache line), so a tile of
//! up to six rows of `x` times one panel keeps its 6 × 16 sums in twelve AVX registers and reads
//! each weight once per tile. Inputs are taken 256 at a time, so the panel's part in use (16 KB)
//! stays in the L1 cache while every row of `x` passes over it. On x86-64 with AVX2 and FMA (every
//! x86 server since 2013) the tile is written with those instructions, chosen at run time; any
//! other CPU runs the same loops in plain Rust, which the compiler vectorises for it.
//!
//! A product big enough to pay for it is split across the threads of the compute pool (rayon):
//! by rows when there are many, by panels when there are few (a question), each part writing its
//! own rows or its own buffer, so no two threads write the same memory.

use rayon::prelude::*;

/// Output columns per panel: two AVX registers of eight floats.
pub(super) const PANEL: usize = 16;
/// Rows of `x` per tile: six rows × two registers = twelve of the sixteen AVX registers.
const TILE_ROWS: usize = 6;
/// Inputs per pass over a panel: 256 × 16 floats = 16 KB of weights, which stay in L1.
const DEPTH: usize = 256;
/// Multiply-adds a thread must get for a product to be split: about 20 µs of work, against the
/// few microseconds it takes to hand a part to a thread of the pool that is already awake.
const MIN_PART: usize = 1 << 19;
/// Below this many rows a product is split by panels (each part writes a small buffer of its
/// own, copied into place); from it on, by rows.
const SPLIT_BY_ROWS: usize = 4 * TILE_ROWS;

/// One input's 16 weights in a panel (or the panel's 16 biases): one cache line.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Lane([f32; PANEL]);

/// A linear layer `y = x · Wᵀ + b`, its weights packed in panels (see the module doc).
#[derive(Debug)]
pub(super) struct Linear {
    inputs: usize,
    outputs: usize,
    /// Panel `p`, input `k` at `p * inputs + k`; the last panel is padded with zeros.
    panels: Vec<Lane>,
    /// The biases of each panel, padded with zeros.
    bias: Vec<Lane>,
}

impl Linear {
    /// Packs a layer whose weight is stored as PyTorch does, `outputs` rows of `inputs`.
    ///
    /// The caller checked the lengths (`weight` is `outputs × inputs`, `bias` is `outputs`).
    pub(super) fn new(weight: &[f32], bias: &[f32], outputs: usize, inputs: usize) -> Self {
        assert_eq!(weight.len(), outputs * inputs, "weight shape");
        assert_eq!(bias.len(), outputs, "bias shape");
        let count = outputs.div_ceil(PANEL);
        let mut panels = vec![Lane([0.0; PANEL]); count * inputs];
        let mut biases = vec![Lane([0.0; PANEL]); count];
        for (out, row) in weight.chunks_exact(inputs).enumerate() {
            let (panel, lane) = (out / PANEL, out % PANEL);
            for (k, w) in row.iter().enumerate() {
                panels[panel * inputs + k].0[lane] = *w;
            }
            biases[panel].0[lane] = bias[out];
        }
        Self { inputs, outputs, panels, bias: biases }
    }

    /// `y = x · Wᵀ + b` for `rows` rows: `x` is `rows × inputs`, `y` is `rows × outputs`.
    pub(super) fn forward(&self, x: &[f32], rows: usize, y: &mut [f32]) {
        self.product(x, rows, y, simd::available());
    }

    /// [`Linear::forward`], with the AVX2 tile (`fast`, which the caller checked the CPU has) or
    /// the plain one.
    pub(super) fn product(&self, x: &[f32], rows: usize, y: &mut [f32], fast: bool) {
        assert_eq!(x.len(), rows * self.inputs, "input shape");
        assert_eq!(y.len(), rows * self.outputs, "output shape");
        let panels = self.outputs.div_ceil(PANEL);
        let work = rows * self.outputs * self.inputs;
        let parts = (work / MIN_PART).clamp(1, rayon::current_num_threads().max(1));
        if parts == 1 || rows == 0 {
            self.run(x, rows, 0..panels, y, self.outputs, fast);
        } else if rows >= SPLIT_BY_ROWS {
            let per = rows.div_ceil(parts).next_multiple_of(TILE_ROWS);
            y.par_chunks_mut(per * self.outputs).zip(x.par_chunks(per * self.inputs)).for_each(|(y, x)| {
                self.run(x, x.len() / self.inputs, 0..panels, y, self.outputs, fast);
            });
        } else {
            let per = panels.div_ceil(parts);
            let parts: Vec<(usize, Vec<f32>)> = (0..panels.div_ceil(per))
                .into_par_iter()
                .map(|part| {
                    let (first, last) = (part * per, ((part + 1) * per).min(panels));
                    let width = (last * PANEL).min(self.outputs) - first * PANEL;
                    let mut part = vec![0.0; rows * width];
                    self.run(x, rows, first..last, &mut part, width, fast);
                    (first * PANEL, part)
                })
                .collect();
            for (column, part) in parts {
                let width = part.len() / rows;
                for (row, values) in part.chunks_exact(width).enumerate() {
                    let start = row * self.outputs + column;
                    y[start..start + width].copy_from_slice(values);
                }
            }
        }
    }

    /// The panels `panels` of the product for `rows` rows, into `y` (row stride `stride`), whose
    /// first column is the first panel's.
    fn run(&self, x: &[f32], rows: usize, panels: std::ops::Range<usize>, y: &mut [f32], stride: usize, fast: bool) {
        let first_column = panels.start * PANEL;
        for start in (0..self.inputs).step_by(DEPTH) {
            let depth = DEPTH.min(self.inputs - start);
            for panel in panels.clone() {
                let base = panel * self.inputs + start;
                let weights = &self.panels[base..base + depth];
                let bias = (start == 0).then(|| &self.bias[panel]);
                let column = panel * PANEL - first_column;
                let columns = PANEL.min(self.outputs - panel * PANEL);
                for row in (0..rows).step_by(TILE_ROWS) {
                    let tile = Tile {
                        x: &x[row * self.inputs + start..],
                        x_stride: self.inputs,
                        weights,
                        bias,
                        columns,
                        stride,
                    };
                    let y = &mut y[row * stride + column..];
                    tile.run(TILE_ROWS.min(rows - row), y, fast);
                }
            }
        }
    }
}

/// One tile: up to six rows of `x` times one panel's part, added to `y` (or, on the first pass
/// over the inputs, to the panel's biases).
struct Tile<'a> {
    /// The tile's first row, from the first input of this pass; rows are `x_stride` apart.
    x: &'a [f32],
    x_stride: usize,
    /// The panel's weights for this pass's inputs.
    weights: &'a [Lane],
    /// The panel's biases on the first pass; on later ones the sums start from `y`.
    bias: Option<&'a Lane>,
    /// How many of the panel's 16 columns exist (fewer only in a layer's last panel).
    columns: usize,
    /// The distance between two rows of `y`.
    stride: usize,
}

impl Tile<'_> {
    fn run(&self, rows: usize, y: &mut [f32], fast: bool) {
        // The slices the loops read and write, checked once here so that the loops need not.
        assert!((1..=TILE_ROWS).contains(&rows), "tile rows");
        assert!(self.x.len() >= (rows - 1) * self.x_stride + self.weights.len(), "tile input");
        assert!(y.len() >= (rows - 1) * self.stride + self.columns, "tile output");
        #[cfg(target_arch = "x86_64")]
        if fast {
            return simd::tile(self, rows, y);
        }
        let _ = fast;
        match rows {
            1 => self.plain::<1>(y),
            2 => self.plain::<2>(y),
            3 => self.plain::<3>(y),
            4 => self.plain::<4>(y),
            5 => self.plain::<5>(y),
            _ => self.plain::<TILE_ROWS>(y),
        }
    }

    /// The sums a tile starts from: the biases, or what `y` holds after the earlier passes.
    fn start<const R: usize>(&self, y: &[f32]) -> [[f32; PANEL]; R] {
        let mut sums = [[0.0; PANEL]; R];
        for (r, sum) in sums.iter_mut().enumerate() {
            match self.bias {
                Some(bias) => *sum = bias.0,
                None => sum[..self.columns].copy_from_slice(&y[r * self.stride..r * self.stride + self.columns]),
            }
        }
        sums
    }

    fn store<const R: usize>(&self, sums: &[[f32; PANEL]; R], y: &mut [f32]) {
        for (r, sum) in sums.iter().enumerate() {
            y[r * self.stride..r * self.stride + self.columns].copy_from_slice(&sum[..self.columns]);
        }
    }

    /// The tile in plain Rust, for CPUs without AVX2 and FMA.
    fn plain<const R: usize>(&self, y: &mut [f32]) {
        let mut sums = self.start::<R>(y);
        for (k, lane) in self.weights.iter().enumerate() {
            for (r, sum) in sums.iter_mut().enumerate() {
                let a = self.x[r * self.x_stride + k];
                for (s, w) in sum.iter_mut().zip(&lane.0) {
                    *s += a * w;
                }
            }
        }
        self.store(&sums, y);
    }
}

/// GELU as BERT defines it, `x · Φ(x) = x/2 · (1 + erf(x/√2))`, on every value.
pub(super) fn gelu(values: &mut [f32]) {
    if simd::available() {
        simd::gelu(values);
    } else {
        gelu_plain(values);
    }
}

/// `exp(x - max)` of every value, and their sum: the numerators of softmax.
pub(super) fn exp_shifted(values: &mut [f32], max: f32) -> f32 {
    if simd::available() { simd::exp_shifted(values, max) } else { exp_shifted_plain(values, max) }
}

#[inline(always)]
fn gelu_plain(values: &mut [f32]) {
    for v in values {
        *v = 0.5 * *v * (1.0 + erf(*v * std::f32::consts::FRAC_1_SQRT_2));
    }
}

#[inline(always)]
fn exp_shifted_plain(values: &mut [f32], max: f32) -> f32 {
    let mut sum = 0.0;
    for v in values {
        *v = exp(*v - max);
        sum += *v;
    }
    sum
}

/// erf to within 1.5 × 10⁻⁷ (Abramowitz and Stegun 7.1.26), with no branch, so that a loop of
/// it vectorises (libm's `erff` took 8% of a question's embedding).
#[inline(always)]
pub(super) fn erf(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [0.254_829_6, -0.284_496_74, 1.421_413_8, -1.453_152_1, 1.061_405_4];
    let z = x.abs();
    let t = 1.0 / (1.0 + P * z);
    let poly = ((((A[4] * t + A[3]) * t + A[2]) * t + A[1]) * t + A[0]) * t;
    let y = 1.0 - poly * exp(-z * z);
    y.copysign(x)
}

/// eˣ to within a few units in the last place for x in [-87, 88] (clamped outside it, where
/// f32 has nothing but 0 and infinity to give), with no branch and no call, so it vectorises.
#[inline(always)]
pub(super) fn exp(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // 1.5 × 2²³: adding it rounds a float below 2²² to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2_E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    // eʳ for |r| ≤ ln2/2 by its Taylor series to r⁷: the error is below 2 × 10⁻⁸ relative.
    let p = 1.0
        + r * (1.0
            + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r / 5040.0))))));
    // 2ⁿ built from its exponent bits; n is in [-126, 127] after the clamp.
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    p * scale
}

/// The same steps with AVX2 and FMA, on the CPUs that have them.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
pub(super) mod simd {
    use std::arch::x86_64::{
        __m256, _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps, _mm256_storeu_ps,
    };

    use super::{PANEL, TILE_ROWS, Tile};

    /// Whether this CPU has AVX2 and FMA (std caches the answer).
    #[inline]
    pub(crate) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }

    pub(super) fn tile(tile: &Tile<'_>, rows: usize, y: &mut [f32]) {
        // SAFETY: `available()` was true (the caller's `fast`), and `Tile::run` checked that `x`
        // holds `rows` rows of the pass's inputs at `x_stride` and `y` holds `rows` rows of
        // `columns` at `stride`, which is all `sums` reads and writes.
        unsafe {
            match rows {
                1 => sums::<1>(tile, y),
                2 => sums::<2>(tile, y),
                3 => sums::<3>(tile, y),
                4 => sums::<4>(tile, y),
                5 => sums::<5>(tile, y),
                _ => sums::<TILE_ROWS>(tile, y),
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn sums<const R: usize>(tile: &Tile<'_>, y: &mut [f32]) {
        let mut acc: [[__m256; 2]; R] = [[_mm256_setzero_ps(); 2]; R];
        let start = tile.start::<R>(y);
        for (a, s) in acc.iter_mut().zip(&start) {
            // SAFETY: `s` is 16 floats.
            unsafe {
                a[0] = _mm256_loadu_ps(s.as_ptr());
                a[1] = _mm256_loadu_ps(s.as_ptr().add(8));
            }
        }
        let x = tile.x.as_ptr();
        for (k, lane) in tile.weights.iter().enumerate() {
            // SAFETY: a lane is 16 floats; row `r < R` of the tile's input at `k` is in `x`
            // (checked by `Tile::run`).
            unsafe {
                let w0 = _mm256_loadu_ps(lane.0.as_ptr());
                let w1 = _mm256_loadu_ps(lane.0.as_ptr().add(8));
                for (r, a) in acc.iter_mut().enumerate() {
                    let v = _mm256_broadcast_ss(&*x.add(r * tile.x_stride + k));
                    a[0] = _mm256_fmadd_ps(v, w0, a[0]);
                    a[1] = _mm256_fmadd_ps(v, w1, a[1]);
                }
            }
        }
        let mut out = [[0.0f32; PANEL]; R];
        for (o, a) in out.iter_mut().zip(&acc) {
            // SAFETY: `o` is 16 floats.
            unsafe {
                _mm256_storeu_ps(o.as_mut_ptr(), a[0]);
                _mm256_storeu_ps(o.as_mut_ptr().add(8), a[1]);
            }
        }
        tile.store(&out, y);
    }

    pub(super) fn gelu(values: &mut [f32]) {
        // SAFETY: the caller checked `available()`.
        unsafe { gelu_avx2(values) }
    }

    pub(super) fn exp_shifted(values: &mut [f32], max: f32) -> f32 {
        // SAFETY: the caller checked `available()`.
        unsafe { exp_shifted_avx2(values, max) }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn gelu_avx2(values: &mut [f32]) {
        super::gelu_plain(values);
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn exp_shifted_avx2(values: &mut [f32], max: f32) -> f32 {
        super::exp_shifted_plain(values, max)
    }
}

/// Other CPUs: the plain loops only.
#[cfg(not(target_arch = "x86_64"))]
pub(super) mod simd {
    pub(crate) fn available() -> bool {
        false
    }

    pub(super) fn gelu(values: &mut [f32]) {
        super::gelu_plain(values);
    }

    pub(super) fn exp_shifted(values: &mut [f32], max: f32) -> f32 {
        super::exp_shifted_plain(values, max)
    }
}
