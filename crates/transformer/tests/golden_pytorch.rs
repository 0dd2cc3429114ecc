//! The tiny model against PyTorch (fixtures written by dev/reference/golden.py in float64): logits,
//! loss, every parameter gradient, and the losses and parameters of 5 Adam steps with Eq. 3.

mod common;
use common::*;
use safetensors::tensor::Dtype;
use safetensors::SafeTensors;
use transformer::train::{Schedule, Trainer};
use transformer::{Batch, ModelConfig, Transformer, Workspace};

struct Fixture {
    bytes: Vec<u8>,
}

impl Fixture {
    fn open(name: &str) -> Self {
        let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        Fixture { bytes: std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e} (run dev/reference/golden.py)")) }
    }
    fn st(&self) -> SafeTensors<'_> {
        SafeTensors::deserialize(&self.bytes).expect("fixture parses")
    }
    fn meta(&self, key: &str) -> String {
        let (_, m) = SafeTensors::read_metadata(&self.bytes).unwrap();
        m.metadata()
            .as_ref()
            .and_then(|m| m.get(key).cloned())
            .unwrap_or_else(|| panic!("fixture metadata lacks {key}"))
    }
    fn f32s(&self, name: &str) -> Vec<f32> {
        let st = self.st();
        let t = st.tensor(name).unwrap_or_else(|_| panic!("fixture lacks {name}"));
        assert_eq!(t.dtype(), Dtype::F32, "{name}");
        t.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    }
    fn i64s(&self, name: &str) -> Vec<i64> {
        let st = self.st();
        let t = st.tensor(name).unwrap_or_else(|_| panic!("fixture lacks {name}"));
        assert_eq!(t.dtype(), Dtype::I64, "{name}");
        t.data().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()
    }
    fn config(&self) -> ModelConfig {
        serde_json::from_str(&self.meta("config")).expect("config metadata")
    }
    /// A flat buffer in our layout from tensors named `prefix + layout name`.
    fn flat(&self, c: &ModelConfig, prefix: &str) -> Vec<f32> {
        let layout = transformer::params::ParamLayout::new(c);
        let mut v = vec![0f32; layout.total()];
        for e in layout.entries() {
            let t = self.f32s(&format!("{prefix}{}", e.name));
            assert_eq!(t.len(), e.len(), "{}", e.name);
            v[e.range()].copy_from_slice(&t);
        }
        v
    }
    fn batch(&self) -> Batch {
        let src: Vec<u32> = self.i64s("input.src").iter().map(|&x| x as u32).collect();
        let tgt_in: Vec<u32> = self.i64s("input.tgt_in").iter().map(|&x| x as u32).collect();
        let tgt_out: Vec<u32> = self.i64s("input.tgt_out").iter().map(|&x| x as u32).collect();
        let src_lens: Vec<usize> = self.i64s("input.src_lens").iter().map(|&x| x as usize).collect();
        let tgt_lens: Vec<usize> = self.i64s("input.tgt_lens").iter().map(|&x| x as usize).collect();
        let b = src_lens.len();
        Batch {
            b,
            s: src.len() / b,
            t: tgt_in.len() / b,
            src,
            src_lens,
            tgt_in,
            tgt_out,
            tgt_lens,
            src_drop: Vec::new(),
            guide: Vec::new(),
        }
    }
}

/// Per-tensor check of a flat buffer against the fixture, naming the tensor on failure. The
/// absolute tolerance is `atol + scale_tol · max|want|` of that tensor: f32 rounding, amplified
/// through the network, is relative to a tensor's scale, not to each element (an element that is
/// a small difference of large terms keeps the large terms' absolute error).
fn check_tensors(
    what: &str,
    c: &ModelConfig,
    got: &[f32],
    want: &[f32],
    atol: f64,
    scale_tol: f64,
    skip: impl Fn(&str) -> bool,
) {
    let layout = transformer::params::ParamLayout::new(c);
    for e in layout.entries() {
        if skip(&e.name) {
            continue;
        }
        let want = to_f64(&want[e.range()]);
        let scale = want.iter().fold(0f64, |a, b| a.max(b.abs()));
        assert_close(&format!("{what} {}", e.name), &to_f64(&got[e.range()]), &want, atol + scale_tol * scale, 0.0);
    }
}

/// W^K's bias cannot change any softmax (it adds the same amount to every score of a query), so its
/// exact gradient is zero and both sides hold rounding noise.
fn is_key_bias(name: &str) -> bool {
    name.ends_with(".b_k")
}

fn golden(file: &str) {
    let fx = Fixture::open(file);
    let c = fx.config();
    let params = fx.flat(&c, "");
    let model = Transformer::from_params(c.clone(), params.clone()).unwrap();
    let batch = fx.batch();
    batch.validate(&c).unwrap();

    // Logits and loss.
    let mut ws = Workspace::new();
    model.forward(&batch, &mut ws, None).unwrap();
    assert_close("logits", &to_f64(&ws.logits), &to_f64(&fx.f32s("out.logits")), 2e-5, 2e-5);
    let tokens = batch.target_tokens();
    let sums = model.loss(&batch, &mut ws, c.label_smoothing, 1.0 / tokens as f32).unwrap();
    assert_close("loss", &[sums.loss / tokens as f64], &to_f64(&fx.f32s("out.loss")), 1e-6, 1e-6);
    assert_close("nll", &[sums.nll / tokens as f64], &to_f64(&fx.f32s("out.nll")), 1e-6, 1e-6);

    // Every gradient.
    let mut grads = vec![0f32; params.len()];
    model.backward(&batch, &mut ws, None, &mut grads).unwrap();
    let want = fx.flat(&c, "grad.");
    // Measured worst error: 1.05e-5 of a tensor's largest gradient; a one-term mistake is O(1).
    check_tensors("grad", &c, &grads, &want, 0.0, 3e-5, is_key_bias);
    let layout = transformer::params::ParamLayout::new(&c);
    for e in layout.entries().iter().filter(|e| is_key_bias(&e.name)) {
        assert!(grads[e.range()].iter().all(|g| g.abs() < 1e-6), "{}: gradient should be ~0", e.name);
    }

    // Five Adam steps with Eq. 3 (warmup and lr_scale from the fixture), no dropout.
    let schedule = Schedule {
        d_model: c.d_model,
        warmup: fx.meta("warmup").parse().unwrap(),
        lr_scale: fx.meta("lr_scale").parse().unwrap(),
    };
    let mut trainer = Trainer::new(model, schedule, 0).unwrap();
    let mut losses = Vec::new();
    for _ in 0..5 {
        losses.push(trainer.train_step(std::slice::from_ref(&batch)).unwrap().loss);
    }
    assert_close("adam losses", &losses, &to_f64(&fx.f32s("adam.losses")), 1e-5, 1e-5);
    // Adam's step is scale-invariant, so an element whose gradient is only rounding noise moves by a
    // fraction of lr (≈ 0.04 here) differently in f32 and f64. Such elements exist beyond the key
    // biases: a softmax ignores score shifts shared by all keys, and the LayerNorm outputs that feed
    // W^K share a common component. Hence two bounds: every element within 1e-3 (a missing bias
    // correction moves parameters by 0.3·lr ≈ 1e-2 per step, a wrong schedule by more), and each
    // tensor's median error within 1e-6 (anything systematic moves the median by O(lr); the few
    // ill-conditioned elements cannot). The key biases are left out.
    let after = fx.flat(&c, "after.");
    check_tensors("after 5 Adam steps", &c, &trainer.model().params, &after, 1e-3, 0.0, is_key_bias);
    for e in layout.entries().iter().filter(|e| !is_key_bias(&e.name)) {
        let mut errs: Vec<f32> = e.range().map(|i| (trainer.model().params[i] - after[i]).abs()).collect();
        errs.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let median = errs[errs.len() / 2];
        assert!(median <= 1e-6, "after 5 Adam steps {}: median error {median:e} > 1e-6", e.name);
    }
}

#[test]
fn golden_sinusoidal() {
    golden("golden_tiny.safetensors");
}

#[test]
fn golden_learned_positions() {
    golden("golden_tiny_learned.safetensors");
}
