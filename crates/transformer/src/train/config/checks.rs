//! The run configuration's checks: every number's range, the rules between fields, and what must
//! agree between the run, its model and this machine's memory.

use super::{DataSection, RunConfig};
use crate::config::ModelConfig;
use crate::data::parallel::FilterConfig;
use crate::error::{Error, Result};
use crate::task::Task;

impl RunConfig {
    /// Checks every number of the data and train sections: ranges, finiteness, and the rules
    /// between fields. Errors name the field and the allowed range.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        let (d, t) = (&self.data, &self.train);
        if t.init_optimizer && t.init.is_none() {
            return bad("train.init_optimizer keeps the Adam moments of train.init, which is not set".into());
        }
        let at_least_one = [
            ("train.accumulate", t.accumulate as u64),
            ("train.keep_last", t.keep_last as u64),
            ("train.max_src_tokens", t.max_src_tokens as u64),
            ("train.max_tgt_tokens", t.max_tgt_tokens as u64),
            ("train.warmup", t.warmup),
            ("train.checkpoint_steps", t.checkpoint_steps.unwrap_or(1)),
            ("train.valid_steps", t.valid_steps.unwrap_or(1)),
        ];
        for (name, v) in at_least_one {
            if v == 0 {
                return bad(format!("{name} = 0: it must be at least 1"));
            }
        }
        for (name, v, max) in [
            ("train.max_src_tokens", t.max_src_tokens, 1 << 24),
            ("train.max_tgt_tokens", t.max_tgt_tokens, 1 << 24),
            ("train.accumulate", t.accumulate, 1 << 20),
            ("train.keep_last", t.keep_last, 1 << 20),
            ("data.vocab_size", d.vocab_size, 1 << 24),
        ] {
            if v > max {
                return bad(format!("{name} = {v} exceeds the supported maximum of {max}"));
            }
        }
        if d.vocab_size <= crate::vocab::SPECIAL_TOKENS {
            return bad(format!(
                "data.vocab_size = {} must exceed the {} special tokens",
                d.vocab_size,
                crate::vocab::SPECIAL_TOKENS
            ));
        }
        if t.valid_f1_beam == 0 || t.valid_f1_beam > crate::decode::beam::MAX_BEAM {
            return bad(format!(
                "train.valid_f1_beam = {} must lie in [1, {}]",
                t.valid_f1_beam,
                crate::decode::beam::MAX_BEAM
            ));
        }
        if t.valid_f1_average > t.keep_last.max(1) {
            return bad(format!(
                "train.valid_f1_average = {} exceeds train.keep_last = {}: a run keeps only that many checkpoints to average",
                t.valid_f1_average, t.keep_last
            ));
        }
        self.data.validate_task_fields()?;
        if !(t.lr_scale.is_finite() && t.lr_scale > 0.0 && t.lr_scale <= 1e3) {
            return bad(format!("train.lr_scale = {} must be a number in (0, 1000]", t.lr_scale));
        }
        FilterConfig { max_tokens: d.max_tokens, max_ratio: d.max_ratio }
            .validate(("data.max_tokens", "data.max_ratio"))?;
        if !(t.checkpoint_minutes.is_finite() && t.checkpoint_minutes > 0.0) {
            return bad(format!("train.checkpoint_minutes = {} must be a positive number", t.checkpoint_minutes));
        }
        if let Some(m) = t.time_limit_minutes.filter(|m| !(m.is_finite() && *m >= 0.0)) {
            return bad(format!("train.time_limit_minutes = {m} must be a finite number ≥ 0"));
        }
        Ok(())
    }

    /// The rules between the run and its model: every kept pair must fit the model's positions
    /// (a target of n tokens takes n + 1 with EOS), and the run must fit in this machine's memory
    /// (`available_bytes`, when known).
    pub fn validate_for(&self, model: &ModelConfig, available_bytes: Option<u64>) -> Result<()> {
        let (d, t) = (&self.data, &self.train);
        if model.parsing.source_pointer && d.task != crate::task::Task::Parsing {
            return Err(Error::Config(
                "model.source_pointer (the next-word pointer) follows the leaves of a tree: it needs \
                 data.task = \"parsing\""
                    .into(),
            ));
        }
        if model.parsing.next_closer && d.task != crate::task::Task::Parsing {
            return Err(Error::Config(
                "model.next_closer (the next-closer input) follows the brackets of a tree: it needs \
                 data.task = \"parsing\""
                    .into(),
            ));
        }
        if model.parsing.char_dim > 0 && d.task != crate::task::Task::Parsing {
            return Err(Error::Config(
                "model.char_dim (the character encoder) reads the words of a sentence to parse: it needs \
                 data.task = \"parsing\""
                    .into(),
            ));
        }
        if let Some(a) = &d.guided_alignment {
            if d.task != crate::task::Task::Translation || d.train_bin.is_some() {
                return Err(Error::Config(format!(
                    "data.guided_alignment = {:?} aligns the words of translation pairs read from text: it needs \
                     data.task = \"translation\" and no data.train_bin",
                    a.display().to_string()
                )));
            }
            if !(t.guided_alignment_weight.is_finite() && t.guided_alignment_weight > 0.0) {
                return Err(Error::Config(format!(
                    "train.guided_alignment_weight = {} must be a number above 0 (Marian's default is 0.1)",
                    t.guided_alignment_weight
                )));
            }
            if let Some(l) = t.guided_alignment_layer.filter(|&l| l == 0 || l > model.n_layers) {
                return Err(Error::Config(format!(
                    "train.guided_alignment_layer = {l}: the decoder has layers 1 to {}",
                    model.n_layers
                )));
            }
        } else if t.guided_alignment_layer.is_some() {
            return Err(Error::Config("train.guided_alignment_layer needs data.guided_alignment".into()));
        }
        if t.word_dropout && d.task != crate::task::Task::Parsing {
            return Err(Error::Config(
                "train.word_dropout counts the words of sentences to parse: it needs data.task = \"parsing\"".into(),
            ));
        }
        if d.train_bin.is_none() && d.max_tokens >= model.max_positions {
            return Err(Error::Config(format!(
                "data.max_tokens = {} must be below model.max_positions = {} (a target of max_tokens \
                 tokens takes max_tokens + 1 positions with its EOS): lower data.max_tokens or raise \
                 model.max_positions",
                d.max_tokens, model.max_positions
            )));
        }
        let need = estimate_training_bytes(model, t.max_src_tokens.max(t.max_tgt_tokens));
        if let Some(have) = available_bytes.filter(|&have| need > have) {
            return Err(Error::Config(format!(
                "training this model needs about {:.1} GB (parameters, gradients and Adam moments: {:.1} GB) \
                 but this machine has {:.1} GB: lower model.n_layers, model.d_model, model.d_ff or \
                 train.max_src_tokens/max_tgt_tokens",
                need as f64 / 1e9,
                (16 * crate::params::param_count(model) as u64) as f64 / 1e9,
                have as f64 / 1e9
            )));
        }
        Ok(())
    }
}

impl DataSection {
    /// The data fields that belong to one task only: a translation run names no treebank files,
    /// tree format or silver trees; a parsing run no target files, and its file ranges, gold
    /// repetition and silver trees must agree.
    fn validate_task_fields(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        let d = self;
        match d.task {
            Task::Translation => {
                if d.tree_format != crate::data::trees::TreeFormat::default() {
                    return bad(format!(
                        "data.tree_format = {:?} says how trees are written: it applies to task = \"parsing\" only",
                        d.tree_format.name()
                    ));
                }
                if let Some(f) = d.train_files.as_ref().or(d.valid_files.as_ref()) {
                    return bad(format!(
                        "data.train_files/valid_files ({f}) select treebank files: they apply to task = \"parsing\" only"
                    ));
                }
                if let Some(p) = &d.silver_src {
                    return bad(format!(
                        "data.silver_src = {:?} names silver trees: it applies to task = \"parsing\" only",
                        p.display().to_string()
                    ));
                }
            }
            Task::Parsing => {
                for (name, p) in [("data.train_tgt", &d.train_tgt), ("data.valid_tgt", &d.valid_tgt)] {
                    if !p.as_os_str().is_empty() {
                        return bad(format!(
                            "{name} = {:?}: parsing reads its targets from the trees of the treebank; remove it",
                            p.display().to_string()
                        ));
                    }
                }
                for r in [&d.train_files, &d.valid_files].into_iter().flatten() {
                    crate::data::trees::FileRange::parse(r)?;
                }
                if !(1..=1000).contains(&d.gold_repeat) {
                    return bad(format!("data.gold_repeat = {} must be between 1 and 1000", d.gold_repeat));
                }
                if let (Some(_), Some(bin)) = (&d.silver_src, &d.train_bin) {
                    return bad(format!(
                        "data.silver_src with data.train_bin = {:?}: prepared data holds the gold pairs only; leave \
                         out train_bin to train on both",
                        bin.display().to_string()
                    ));
                }
                if d.gold_repeat > 1 && d.silver_src.is_none() {
                    return bad(format!(
                        "data.gold_repeat = {} oversamples the gold trees beside silver ones: give data.silver_src too",
                        d.gold_repeat
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A rough upper estimate of a training run's memory in bytes: parameters, gradients and both
/// Adam moments (16 bytes a parameter), plus the activations of a batch of `batch_tokens` tokens
/// (what the forward keeps per layer and position, the attention weights of sequences up to the
/// model's positions, and the logits with their gradient). Saturates instead of overflowing.
pub fn estimate_training_bytes(c: &ModelConfig, batch_tokens: usize) -> u64 {
    let (d, f, h) = (c.d_model as u64, c.d_ff as u64, c.n_heads as u64);
    let (hk, hv) = (h * c.d_k as u64, h * c.d_v as u64);
    let tokens = batch_tokens as u64;
    let seq = (c.max_positions as u64).min(tokens.max(1));
    let params = 16u64.saturating_mul(crate::params::param_count(c) as u64);
    // Per layer and position: Q|K|V, context, norms and FFN hidden, twice for the decoder's two
    // attentions, plus attention weights over `seq` keys per head.
    // A smooth activation keeps its pre-activations as well (F more).
    let ffn = if c.import.activation == crate::config::Activation::Relu { 2 * f } else { 3 * f };
    let per_position = (4 * (2 * hk + hv) + 12 * d + ffn).saturating_add(3u64.saturating_mul(h).saturating_mul(seq));
    let layers = 2 * c.n_layers as u64;
    let acts = tokens.saturating_mul(layers).saturating_mul(per_position).saturating_mul(4);
    let logits = tokens.saturating_mul(c.vocab_size as u64).saturating_mul(8);
    params.saturating_add(acts).saturating_add(logits)
}

/// This machine's memory in bytes (Linux: MemTotal of /proc/meminfo), if known.
pub fn machine_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
}
