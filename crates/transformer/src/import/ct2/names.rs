//! Where each of our tensors is in CTranslate2's `TransformerSpec` (revision 7): one table that
//! both the export and the import walk, so the two cannot drift apart.
//!
//! CTranslate2 fuses the self-attention's query, key and value maps into one `linear_0` and the
//! cross-attention's key and value into one `linear_1` (rows stacked in that order); everything
//! else is one tensor of ours, in our orientation ((out, in) matrices).

use crate::config::ModelConfig;

/// One CTranslate2 variable and the tensors of ours whose rows it stacks.
pub(crate) struct Slot {
    /// CTranslate2's name.
    pub(crate) ct2: String,
    /// Ours, in stacking order.
    pub(crate) ours: Vec<String>,
}

fn slot(ct2: String, ours: Vec<String>) -> Slot {
    Slot { ct2, ours }
}

/// A linear map's weight and bias, stacking our maps `parts` of attention `ours`.
fn linear(out: &mut Vec<Slot>, ct2: &str, ours: &str, parts: &[&str]) {
    for (t, o) in [("weight", "w"), ("bias", "b")] {
        out.push(slot(format!("{ct2}/{t}"), parts.iter().map(|x| format!("{ours}.{o}_{x}")).collect()));
    }
}

fn norm(out: &mut Vec<Slot>, ct2: &str, ours: &str) {
    for t in ["gamma", "beta"] {
        out.push(slot(format!("{ct2}/{t}"), vec![format!("{ours}.{t}")]));
    }
}

fn ffn(out: &mut Vec<Slot>, ct2: &str, ours: &str) {
    for (i, n) in [(0, 1), (1, 2)] {
        out.push(slot(format!("{ct2}/ffn/linear_{i}/weight"), vec![format!("{ours}.ffn.w_{n}")]));
        out.push(slot(format!("{ct2}/ffn/linear_{i}/bias"), vec![format!("{ours}.ffn.b_{n}")]));
    }
    norm(out, &format!("{ct2}/ffn/layer_norm"), &format!("{ours}.ffn_norm"));
}

/// Every layer tensor of a model of `c` (embeddings, positions and the output layer aside).
pub(crate) fn layer_slots(c: &ModelConfig) -> Vec<Slot> {
    let mut out = Vec::new();
    for i in 0..c.n_layers {
        let (q, p) = (format!("encoder/layer_{i}"), format!("encoder.layers.{i}"));
        linear(&mut out, &format!("{q}/self_attention/linear_0"), &format!("{p}.self_attn"), &["q", "k", "v"]);
        linear(&mut out, &format!("{q}/self_attention/linear_1"), &format!("{p}.self_attn"), &["o"]);
        norm(&mut out, &format!("{q}/self_attention/layer_norm"), &format!("{p}.self_attn_norm"));
        ffn(&mut out, &q, &p);
    }
    for i in 0..c.n_layers {
        let (q, p) = (format!("decoder/layer_{i}"), format!("decoder.layers.{i}"));
        linear(&mut out, &format!("{q}/self_attention/linear_0"), &format!("{p}.self_attn"), &["q", "k", "v"]);
        linear(&mut out, &format!("{q}/self_attention/linear_1"), &format!("{p}.self_attn"), &["o"]);
        norm(&mut out, &format!("{q}/self_attention/layer_norm"), &format!("{p}.self_attn_norm"));
        linear(&mut out, &format!("{q}/attention/linear_0"), &format!("{p}.cross_attn"), &["q"]);
        linear(&mut out, &format!("{q}/attention/linear_1"), &format!("{p}.cross_attn"), &["k", "v"]);
        linear(&mut out, &format!("{q}/attention/linear_2"), &format!("{p}.cross_attn"), &["o"]);
        norm(&mut out, &format!("{q}/attention/layer_norm"), &format!("{p}.cross_attn_norm"));
        ffn(&mut out, &q, &p);
    }
    out
}

/// Whether CTranslate2 quantizes the variable `name` (its spec has a `{name}_scale`): the weights
/// of linear maps and embeddings.
pub(crate) fn quantizable(name: &str) -> bool {
    let Some(scope) = name.strip_suffix("/weight") else { return false };
    let last = scope.rsplit('/').next().unwrap_or(scope);
    last == "projection" || last == "embeddings" || last.starts_with("linear_") || last.starts_with("embeddings_")
}

/// CTranslate2's activation ids (`ops::ActivationType`).
pub(crate) const ACTIVATIONS: [(crate::config::Activation, i64); 5] = [
    (crate::config::Activation::Relu, 0),
    (crate::config::Activation::GeluTanh, 1),
    (crate::config::Activation::Swish, 2),
    (crate::config::Activation::Gelu, 3),
    (crate::config::Activation::GeluSigmoid, 4),
];
