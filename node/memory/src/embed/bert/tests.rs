//! The encoder held to plain float64 arithmetic: its products for every shape and split, its
//! GELU and exponent, and a whole forward pass of a small random BERT against a padded and
//! masked reference, as Hugging Face's `BertModel` computes it. The real model is held to an
//! independent numpy reference in `embed/minilm/tests.rs`.

use super::kernel::{self, Linear};
use super::*;

/// A small deterministic generator (xorshift), so the tests need no seed file.
struct Numbers(u64);

impl Numbers {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * scale).collect()
    }
}

fn plain_product(x: &[f32], rows: usize, weight: &[f32], bias: &[f32], outputs: usize, inputs: usize) -> Vec<f64> {
    let mut y = vec![0.0f64; rows * outputs];
    for r in 0..rows {
        for o in 0..outputs {
            let sum: f64 = (0..inputs).map(|k| f64::from(x[r * inputs + k]) * f64::from(weight[o * inputs + k])).sum();
            y[r * outputs + o] = sum + f64::from(bias[o]);
        }
    }
    y
}

#[test]
fn a_linear_layer_matches_a_plain_product_for_every_shape_and_split() {
    let mut numbers = Numbers(0x9e37_79b9_7f4a_7c15);
    // Rows of every tile remainder, widths that are and are not multiples of a panel, depths of
    // one and of several passes; the large ones split across threads by panels (15 rows) and by
    // rows (100).
    let shapes = [(1, 16, 8), (5, 40, 7), (7, 384, 300), (13, 17, 513), (15, 1536, 384), (100, 200, 600)];
    let simd = kernel::simd::available();
    for (rows, outputs, inputs) in shapes {
        let weight = numbers.vec(outputs * inputs, 0.1);
        let bias = numbers.vec(outputs, 0.5);
        let x = numbers.vec(rows * inputs, 1.0);
        let layer = Linear::new(&weight, &bias, outputs, inputs);
        let want = plain_product(&x, rows, &weight, &bias, outputs, inputs);
        for fast in [false, simd] {
            let mut y = vec![f32::NAN; rows * outputs];
            layer.product(&x, rows, &mut y, fast);
            for (i, (got, want)) in y.iter().zip(&want).enumerate() {
                let error = (f64::from(*got) - want).abs();
                assert!(
                    error < 1e-4 * (1.0 + want.abs()),
                    "{rows}×{outputs}×{inputs} fast={fast} at {i}: {got} vs {want}"
                );
            }
        }
    }
}

/// erf by its Taylor series, in float64 (exact to ~1e-12 for |x| ≤ 4; ±1 within 2e-8 beyond).
fn erf64(x: f64) -> f64 {
    if x.abs() > 4.0 {
        return x.signum();
    }
    let (mut term, mut sum) = (x, x);
    for n in 1..120 {
        term *= -x * x / f64::from(n);
        sum += term / f64::from(2 * n + 1);
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

#[test]
fn gelu_erf_and_exp_are_accurate_across_their_range() {
    for i in -1000..=1000 {
        let x = i as f32 / 100.0;
        let erf = kernel::erf(x);
        assert!((f64::from(erf) - erf64(f64::from(x))).abs() < 5e-7, "erf({x}) = {erf}");
    }
    let mut values: Vec<f32> = (-1000..=1000).map(|i| i as f32 / 100.0).collect();
    let inputs = values.clone();
    kernel::gelu(&mut values);
    for (x, got) in inputs.iter().zip(&values) {
        let x = f64::from(*x);
        let want = 0.5 * x * (1.0 + erf64(x / std::f64::consts::SQRT_2));
        assert!((f64::from(*got) - want).abs() < 1e-6 * (1.0 + want.abs()), "gelu({x}) = {got}, want {want}");
    }
    for i in -870..=880 {
        let x = i as f32 / 10.0;
        let want = f64::from(x).exp();
        let got = f64::from(kernel::exp(x));
        assert!((got - want).abs() <= 1e-6 * want, "exp({x}) = {got}, want {want}");
    }
    // Past the range, the nearest value f32 can give: 0 below, the largest exponent above.
    assert!(kernel::exp(-1e4) < 1e-37);
    assert!(kernel::exp(1e4) > 1e38);
    let mut shifted = vec![1.0, 3.0, 2.0];
    let sum = kernel::exp_shifted(&mut shifted, 3.0);
    let want = [(-2.0f64).exp(), 1.0, (-1.0f64).exp()];
    for (got, want) in shifted.iter().zip(want) {
        assert!((f64::from(*got) - want).abs() < 1e-6);
    }
    assert!((f64::from(sum) - want.iter().sum::<f64>()).abs() < 1e-6);
}

/// A small random BERT: its config and its tensors by name, as a safetensors file holds them.
struct Tiny {
    config: Config,
    tensors: Vec<(String, Vec<usize>, Vec<f32>)>,
}

impl Tiny {
    fn new(seed: u64) -> Self {
        // An intermediate width that is not a multiple of a panel, and heads of 8.
        let config = Config {
            vocab_size: 50,
            hidden_size: 32,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            intermediate_size: 40,
            hidden_act: "gelu".into(),
            max_position_embeddings: 24,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
            position_embedding_type: "absolute".into(),
        };
        let mut numbers = Numbers(seed);
        let (h, i) = (config.hidden_size, config.intermediate_size);
        let mut tensors = Vec::new();
        let mut add = |name: String, shape: Vec<usize>, scale: f32, offset: f32| {
            let n = shape.iter().product();
            let values = numbers.vec(n, scale).into_iter().map(|v| v + offset).collect();
            tensors.push((name, shape, values));
        };
        add("embeddings.word_embeddings.weight".into(), vec![config.vocab_size, h], 1.0, 0.0);
        add("embeddings.position_embeddings.weight".into(), vec![config.max_position_embeddings, h], 0.3, 0.0);
        add("embeddings.token_type_embeddings.weight".into(), vec![2, h], 0.3, 0.0);
        add("embeddings.LayerNorm.weight".into(), vec![h], 0.2, 1.0);
        add("embeddings.LayerNorm.bias".into(), vec![h], 0.1, 0.0);
        for n in 0..config.num_hidden_layers {
            let at = format!("encoder.layer.{n}");
            for part in ["query", "key", "value"] {
                add(format!("{at}.attention.self.{part}.weight"), vec![h, h], 0.4, 0.0);
                add(format!("{at}.attention.self.{part}.bias"), vec![h], 0.1, 0.0);
            }
            add(format!("{at}.attention.output.dense.weight"), vec![h, h], 0.3, 0.0);
            add(format!("{at}.attention.output.dense.bias"), vec![h], 0.1, 0.0);
            add(format!("{at}.attention.output.LayerNorm.weight"), vec![h], 0.2, 1.0);
            add(format!("{at}.attention.output.LayerNorm.bias"), vec![h], 0.1, 0.0);
            add(format!("{at}.intermediate.dense.weight"), vec![i, h], 0.3, 0.0);
            add(format!("{at}.intermediate.dense.bias"), vec![i], 0.1, 0.0);
            add(format!("{at}.output.dense.weight"), vec![h, i], 0.3, 0.0);
            add(format!("{at}.output.dense.bias"), vec![h], 0.1, 0.0);
            add(format!("{at}.output.LayerNorm.weight"), vec![h], 0.2, 1.0);
            add(format!("{at}.output.LayerNorm.bias"), vec![h], 0.1, 0.0);
        }
        Self { config, tensors }
    }

    fn get(&self, name: &str) -> &[f32] {
        &self.tensors.iter().find(|(n, _, _)| n == name).unwrap_or_else(|| panic!("no {name}")).2
    }

    /// The file, its names prefixed with `prefix`, every tensor in `dtype` (F32, F16 or BF16).
    fn file(&self, prefix: &str, dtype: Dtype) -> Vec<u8> {
        let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = self
            .tensors
            .iter()
            .map(|(name, shape, values)| {
                let data = match dtype {
                    Dtype::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
                    Dtype::BF16 => values.iter().flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes()).collect(),
                    Dtype::F16 => values.iter().flat_map(|v| f32_to_f16(*v).to_le_bytes()).collect(),
                    other => panic!("{other:?}"),
                };
                (format!("{prefix}{name}"), shape.clone(), data)
            })
            .collect();
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = bytes
            .iter()
            .map(|(name, shape, data)| {
                (name.clone(), safetensors::tensor::TensorView::new(dtype, shape.clone(), data).unwrap())
            })
            .collect();
        safetensors::serialize(views, None).unwrap()
    }

    /// Hugging Face's computation, in float64: the texts padded to the longest, padded keys
    /// masked out of attention (an additive −10⁴, as `BertModel` does), the mean over real tokens.
    fn reference(&self, texts: &[(Vec<u32>, Vec<u32>)]) -> Vec<Vec<f64>> {
        let c = &self.config;
        let (h, heads) = (c.hidden_size, c.num_attention_heads);
        let d = h / heads;
        let width = texts.iter().map(|(ids, _)| ids.len()).max().unwrap_or(0);
        let norm = |x: &mut [f64], prefix: &str| {
            let (w, b) =
                (self.get(&format!("{prefix}.LayerNorm.weight")), self.get(&format!("{prefix}.LayerNorm.bias")));
            let mean = x.iter().sum::<f64>() / h as f64;
            let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / h as f64;
            for (j, v) in x.iter_mut().enumerate() {
                *v = (*v - mean) / (var + c.layer_norm_eps).sqrt() * f64::from(w[j]) + f64::from(b[j]);
            }
        };
        let linear = |x: &[f64], name: &str, outputs: usize| -> Vec<f64> {
            let (w, b) = (self.get(&format!("{name}.weight")), self.get(&format!("{name}.bias")));
            let inputs = x.len();
            (0..outputs)
                .map(|o| (0..inputs).map(|k| x[k] * f64::from(w[o * inputs + k])).sum::<f64>() + f64::from(b[o]))
                .collect()
        };
        texts
            .iter()
            .map(|(ids, types)| {
                let real = ids.len();
                let mut x: Vec<Vec<f64>> = (0..width)
                    .map(|t| {
                        let (id, kind) = if t < real { (ids[t] as usize, types[t] as usize) } else { (0, 0) };
                        let mut row: Vec<f64> = (0..h)
                            .map(|j| {
                                f64::from(self.get("embeddings.word_embeddings.weight")[id * h + j])
                                    + f64::from(self.get("embeddings.position_embeddings.weight")[t * h + j])
                                    + f64::from(self.get("embeddings.token_type_embeddings.weight")[kind * h + j])
                            })
                            .collect();
                        norm(&mut row, "embeddings");
                        row
                    })
                    .collect();
                for n in 0..c.num_hidden_layers {
                    let at = format!("encoder.layer.{n}");
                    let q: Vec<Vec<f64>> =
                        x.iter().map(|r| linear(r, &format!("{at}.attention.self.query"), h)).collect();
                    let k: Vec<Vec<f64>> =
                        x.iter().map(|r| linear(r, &format!("{at}.attention.self.key"), h)).collect();
                    let v: Vec<Vec<f64>> =
                        x.iter().map(|r| linear(r, &format!("{at}.attention.self.value"), h)).collect();
                    let mut context = vec![vec![0.0; h]; width];
                    for (t, out) in context.iter_mut().enumerate() {
                        for head in 0..heads {
                            let span = head * d..(head + 1) * d;
                            let scores: Vec<f64> = (0..width)
                                .map(|j| {
                                    let s: f64 =
                                        span.clone().map(|e| q[t][e] * k[j][e]).sum::<f64>() / (d as f64).sqrt();
                                    if j < real { s } else { s - 1e4 }
                                })
                                .collect();
                            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                            let sum: f64 = weights.iter().sum();
                            for e in span {
                                out[e] = (0..width).map(|j| weights[j] / sum * v[j][e]).sum();
                            }
                        }
                    }
                    for (row, ctx) in x.iter_mut().zip(&context) {
                        let projected = linear(ctx, &format!("{at}.attention.output.dense"), h);
                        row.iter_mut().zip(&projected).for_each(|(a, b)| *a += b);
                        norm(row, &format!("{at}.attention.output"));
                        let inner: Vec<f64> = linear(row, &format!("{at}.intermediate.dense"), c.intermediate_size)
                            .into_iter()
                            .map(|u| 0.5 * u * (1.0 + erf64(u / std::f64::consts::SQRT_2)))
                            .collect();
                        let out = linear(&inner, &format!("{at}.output.dense"), h);
                        row.iter_mut().zip(&out).for_each(|(a, b)| *a += b);
                        norm(row, &format!("{at}.output"));
                    }
                }
                (0..h).map(|j| x[..real].iter().map(|r| r[j]).sum::<f64>() / real as f64).collect()
            })
            .collect()
    }
}

/// An IEEE half-precision float nearest `v` (for values well inside its range).
fn f32_to_f16(v: f32) -> u16 {
    let bits = v.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exponent = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    if v == 0.0 || exponent <= 0 {
        return sign;
    }
    let mantissa = (bits >> 13) & 0x3ff;
    let round = (bits >> 12) & 1;
    sign | ((((exponent as u32) << 10) | mantissa) + round) as u16
}

fn texts() -> Vec<(Vec<u32>, Vec<u32>)> {
    vec![
        (vec![1, 7, 9, 2], vec![0, 0, 0, 0]),
        (vec![1, 3, 2], vec![0, 0, 0]),
        (vec![1, 12, 40, 41, 42, 43, 5, 6, 2, 30, 31, 2], vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1]),
        (vec![1], vec![0]),
    ]
}

fn close(got: &[Vec<f32>], want: &[Vec<f64>], tolerance: f64) {
    assert_eq!(got.len(), want.len());
    for (n, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len());
        for (j, (g, w)) in g.iter().zip(w).enumerate() {
            assert!((f64::from(*g) - w).abs() < tolerance, "text {n} dim {j}: {g} vs {w}");
        }
    }
}

#[test]
fn a_small_bert_matches_a_padded_and_masked_reference_one_text_or_many() {
    let tiny = Tiny::new(42);
    let bert = Bert::load(&tiny.file("", Dtype::F32), &tiny.config).unwrap();
    assert_eq!(bert.hidden(), 32);
    let texts = texts();
    let want = tiny.reference(&texts);
    let batch: Vec<Text<'_>> = texts.iter().map(|(ids, types)| Text { ids, types }).collect();
    close(&bert.embed(&batch).unwrap(), &want, 1e-4);
    // Each text alone gives what it gives in the batch: the texts do not see each other.
    for (text, want) in batch.iter().zip(&want) {
        close(&bert.embed(std::slice::from_ref(text)).unwrap(), std::slice::from_ref(want), 1e-4);
    }
    // A batch big enough for attention to run on several threads.
    let many: Vec<Text<'_>> = batch.iter().cycle().take(400).copied().collect();
    let got = bert.embed(&many).unwrap();
    let want_many: Vec<Vec<f64>> = want.iter().cycle().take(400).cloned().collect();
    close(&got, &want_many, 1e-4);
}

#[test]
fn weights_load_with_a_prefix_and_in_half_precision() {
    let tiny = Tiny::new(7);
    let texts = texts();
    let batch: Vec<Text<'_>> = texts.iter().map(|(ids, types)| Text { ids, types }).collect();
    let plain = Bert::load(&tiny.file("", Dtype::F32), &tiny.config).unwrap().embed(&batch).unwrap();
    let prefixed = Bert::load(&tiny.file("bert.", Dtype::F32), &tiny.config).unwrap().embed(&batch).unwrap();
    assert_eq!(plain, prefixed);
    let want: Vec<Vec<f64>> = plain.iter().map(|v| v.iter().map(|x| f64::from(*x)).collect()).collect();
    for dtype in [Dtype::F16, Dtype::BF16] {
        let got = Bert::load(&tiny.file("", dtype), &tiny.config).unwrap().embed(&batch).unwrap();
        // Rounding the weights to 11 or 8 bits moves the outputs a little, not a lot.
        close(&got, &want, if dtype == Dtype::F16 { 0.02 } else { 0.1 });
    }
}

#[test]
fn a_weights_file_that_does_not_fit_the_config_is_refused_with_the_reason() {
    let tiny = Tiny::new(3);
    let file = tiny.file("", Dtype::F32);
    let mut wider = tiny.config.clone();
    wider.intermediate_size = 48;
    let err = Bert::load(&file, &wider).unwrap_err();
    assert!(err.contains("encoder.layer.0.intermediate.dense.weight") && err.contains("[40, 32]"), "{err}");

    let mut deeper = tiny.config.clone();
    deeper.num_hidden_layers = 3;
    let err = Bert::load(&file, &deeper).unwrap_err();
    assert!(err.contains("no tensor encoder.layer.2"), "{err}");

    let err = Bert::load(b"\x08\0\0\0\0\0\0\0not json", &tiny.config).unwrap_err();
    assert!(err.contains("not a safetensors file"), "{err}");

    let mut odd = tiny.config.clone();
    odd.num_attention_heads = 5;
    assert!(Bert::load(&file, &odd).unwrap_err().contains("multiple of num_attention_heads"));
    let mut relu = tiny.config.clone();
    relu.hidden_act = "relu".into();
    assert!(Bert::load(&file, &relu).unwrap_err().contains("hidden_act"));
    let mut huge = tiny.config.clone();
    huge.hidden_size = usize::MAX;
    assert!(Bert::load(&file, &huge).unwrap_err().contains("hidden_size"));

    let ints: Vec<u8> = vec![0; 4];
    let view = safetensors::tensor::TensorView::new(Dtype::I32, vec![1, 1], &ints).unwrap();
    let file = safetensors::serialize([("encoder.layer.0.attention.self.query.weight", view)], None).unwrap();
    let mut flat = tiny.config.clone();
    flat.hidden_size = 1;
    flat.num_attention_heads = 1;
    flat.num_hidden_layers = 1;
    let err = Bert::load(&file, &flat).unwrap_err();
    assert!(err.contains("I32"), "{err}");
}

#[test]
fn tokens_from_another_vocabulary_or_past_the_positions_are_refused() {
    let tiny = Tiny::new(5);
    let bert = Bert::load(&tiny.file("", Dtype::F32), &tiny.config).unwrap();
    let embed = |ids: &[u32], types: &[u32]| bert.embed(&[Text { ids, types }]);
    assert!(embed(&[1, 50], &[0, 0]).unwrap_err().contains("token id 50"));
    assert!(embed(&[1, 2], &[0, 2]).unwrap_err().contains("segment id 2"));
    assert!(embed(&[1, 2], &[0]).unwrap_err().contains("segment ids"));
    assert!(embed(&[], &[]).unwrap_err().contains("no tokens"));
    let long = vec![1; 25];
    assert!(embed(&long, &[0; 25]).unwrap_err().contains("25 tokens"));
    assert!(embed(&long[..24], &[0; 24]).is_ok());
    assert!(bert.embed(&[]).unwrap().is_empty());
}
