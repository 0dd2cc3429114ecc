//! §5 The run configuration (the TOML file of `transformer train`): the model as a Table 3 preset
//! with fields overridden, the data, and the training recipe. Every default is written once, in the
//! sections' `Default` literals and the presets; `--set section.field=value` overrides any field.

use crate::config::{ImportOptions, ModelConfig, ParsingInputs};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::precision::Precision;
use crate::task::Task;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

mod checks;
pub use checks::{estimate_training_bytes, machine_memory_bytes};

/// The model section: a Table 3 preset by name, with any of its fields overridden. The vocabulary
/// size always comes from the BPE model, and LayerNorm's ε stays the preset's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelSection {
    /// Preset name (base, a1, …, big); default "base".
    pub preset: Option<String>,
    /// [`ModelConfig`] fields set by the file, by name, as TOML values.
    #[serde(flatten)]
    pub overrides: toml::Table,
}

impl ModelSection {
    /// Sets the columns `change` gives, as the file's own fields would (a change to a field the
    /// section already sets replaces it).
    pub fn change(&mut self, change: &crate::config::ModelChange) {
        let fields = toml::Table::try_from(change).expect("a model change serialises to TOML");
        self.overrides.extend(fields);
    }
}

/// [`ModelConfig`] fields the model section cannot set: the vocabulary sizes are the tokenizer's,
/// LayerNorm's ε is fixed (a choice where the paper is silent, see docs/deviations.md; a model
/// fine-tuned from an imported one keeps the checkpoint's).
const FIXED_MODEL_FIELDS: [&str; 3] = ["vocab_size", "source_vocab_size", "layer_norm_eps"];

impl ModelSection {
    /// `preset` with this section's overrides. An unknown (or fixed) field, or a value of the wrong
    /// type, is an error that names it, worded as the TOML reader words its own errors.
    fn apply(&self, preset: &ModelConfig) -> std::result::Result<ModelConfig, String> {
        let mut fields = toml::Table::try_from(preset).expect("a model config serialises to TOML");
        for (key, value) in &self.overrides {
            match fields.get_mut(key).filter(|_| !FIXED_MODEL_FIELDS.contains(&key.as_str())) {
                Some(field) => *field = value.clone(),
                None => {
                    let names = field_names(preset);
                    let settable = names.iter().map(String::as_str).filter(|k| !FIXED_MODEL_FIELDS.contains(k));
                    let expected: Vec<String> =
                        std::iter::once("preset").chain(settable).map(|k| format!("`{k}`")).collect();
                    return Err(format!(
                        "unknown field `{key}`, expected one of {}\nin `model`\n",
                        expected.join(", ")
                    ));
                }
            }
        }
        // Read back under the section's name, so that a wrong type is reported "in `model.d_model`".
        #[derive(Deserialize)]
        struct Section<T> {
            model: T,
        }
        let doc: toml::Table = [("model".to_string(), toml::Value::Table(fields))].into_iter().collect();
        let doc = toml::Value::Table(doc);
        // The groups on their own first: flattened into ModelConfig, a wrong type in one of their
        // fields would be reported "in `model`", without the field's name.
        doc.clone().try_into::<Section<ParsingInputs>>().map_err(|e| e.to_string())?;
        doc.clone().try_into::<Section<ImportOptions>>().map_err(|e| e.to_string())?;
        doc.try_into::<Section<ModelConfig>>().map(|s| s.model).map_err(|e| e.to_string())
    }
}

/// The field names of `value`'s serialised form, in their order (that of [`ModelConfig`]'s
/// declaration, its flattened groups' fields where the groups stand), a field that is `None`
/// included. Read back from JSON, which keeps the order (a `toml::Table` sorts its keys).
fn field_names<T: Serialize>(value: &T) -> Vec<String> {
    struct Keys(Vec<String>);
    impl<'de> Deserialize<'de> for Keys {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Keys, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = Keys;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a map")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<Keys, A::Error> {
                    let mut keys = Vec::new();
                    while let Some((k, serde::de::IgnoredAny)) = map.next_entry::<String, serde::de::IgnoredAny>()? {
                        keys.push(k);
                    }
                    Ok(Keys(keys))
                }
            }
            d.deserialize_map(Visit)
        }
    }
    let json = serde_json::to_string(value).expect("a config serialises to JSON");
    serde_json::from_str::<Keys>(&json).expect("a config's JSON is a map").0
}

/// The data section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataSection {
    /// What the model learns (`"translation"` or `"parsing"`); decides how the corpora are read.
    pub task: Task,
    /// Training source text (plain or .gz), line-aligned with `train_tgt`. For parsing, a treebank:
    /// a bracketed file or a directory of `.mrg` files (searched recursively).
    pub train_src: PathBuf,
    /// Training target text (not given for parsing: the targets are the trees).
    pub train_tgt: PathBuf,
    /// Validation source text (for parsing, a treebank).
    pub valid_src: PathBuf,
    /// Validation target text (not given for parsing).
    pub valid_tgt: PathBuf,
    /// Parsing: the treebank files to train on, `FIRST..LAST` by file name (`wsj_0001..wsj_0159`);
    /// all of `train_src` if not given.
    pub train_files: Option<String>,
    /// Parsing: the treebank files to validate on.
    pub valid_files: Option<String>,
    /// Parsing: a treebank of silver trees (a parser's output on unlabeled text: a bracketed file
    /// or a directory of `.mrg` files, all of it) trained on beside the gold trees of `train_src`
    /// (§6.3's semi-supervised setting; docs/parsing.md).
    pub silver_src: Option<PathBuf>,
    /// Parsing, with `silver_src`: how many times each gold tree appears in an epoch beside the
    /// silver trees (gold oversampled).
    pub gold_repeat: usize,
    /// Parsing: what the model writes for a tree, `"tags+words"` (each tag followed by its word's
    /// pieces) or `"tags"` (no words: the paper's target; docs/parsing.md, "The target format").
    pub tree_format: crate::data::trees::TreeFormat,
    /// The shared BPE model; learned from the training text (and saved here) if it does not exist.
    pub bpe: PathBuf,
    /// A directory from `transformer prepare` to train from (memory-mapped) instead of
    /// `train_src`/`train_tgt`, which then only serve to learn the BPE model if it is missing.
    pub train_bin: Option<PathBuf>,
    /// Vocabulary size when the BPE model is learned.
    pub vocab_size: usize,
    /// Longest side kept, in BPE tokens.
    pub max_tokens: usize,
    /// Largest length ratio kept.
    pub max_ratio: f64,
    /// Translation: word alignments of the training pairs, a line each, `s-t` pairs of 0-based
    /// space-separated word positions (what fast_align and eflomal write; Marian's
    /// `--guided-alignment`): one head of the decoder's encoder–decoder attention is trained
    /// towards them (`train.guided_alignment_weight`, `train.guided_alignment_layer`).
    pub guided_alignment: Option<PathBuf>,
}

impl Default for DataSection {
    /// Empty paths (a TOML file must give each of them) and the defaults of the rest.
    fn default() -> Self {
        DataSection {
            task: Task::Translation,
            train_src: PathBuf::new(),
            train_tgt: PathBuf::new(),
            valid_src: PathBuf::new(),
            valid_tgt: PathBuf::new(),
            train_files: None,
            valid_files: None,
            silver_src: None,
            gold_repeat: 1,
            tree_format: crate::data::trees::TreeFormat::default(),
            bpe: PathBuf::new(),
            train_bin: None,
            vocab_size: 8000,
            max_tokens: 250,
            max_ratio: 3.0,
            guided_alignment: None,
        }
    }
}

/// The train section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainSection {
    /// Where checkpoints, metrics and the learning curve go.
    pub output_dir: PathBuf,
    /// Seed of initialisation, data order and dropout.
    pub seed: u64,
    /// Source tokens per batch (padding included).
    pub max_src_tokens: usize,
    /// Target tokens per batch (padding included).
    pub max_tgt_tokens: usize,
    /// Batches per update (gradient accumulation).
    pub accumulate: usize,
    /// Eq. 3 warmup steps.
    pub warmup: u64,
    /// Multiplier on Eq. 3.
    pub lr_scale: f32,
    /// Stop after this many updates.
    pub max_steps: Option<u64>,
    /// Stop after this many epochs.
    pub max_epochs: Option<u64>,
    /// Stop cleanly (with a checkpoint) after this many minutes of training, counted over every
    /// process of the run (stored in the checkpoints), so a resumed run trains the same budget.
    pub time_limit_minutes: Option<f64>,
    /// Write a checkpoint every this many minutes of training, counted like the time limit (the
    /// paper: 10).
    pub checkpoint_minutes: f64,
    /// Also write one every this many updates.
    pub checkpoint_steps: Option<u64>,
    /// Checkpoints kept (older ones are deleted).
    pub keep_last: usize,
    /// Validate every this many updates (and at every epoch's end).
    pub valid_steps: Option<u64>,
    /// Fine-tuning: a run that has no checkpoint of its own starts from this checkpoint's weights
    /// (its model and vocabulary must be the run's; dropout and label smoothing may differ), with
    /// a fresh schedule and, unless `init_optimizer`, fresh Adam moments.
    pub init: Option<PathBuf>,
    /// With `init`: keep the checkpoint's Adam moments (it must have them).
    pub init_optimizer: bool,
    /// Parsing: decode the validation sentences and score them with EVALB every this many epochs
    /// (and at the end of the run); the best checkpoint by F1 is kept as `best.safetensors`. 0: never.
    pub valid_f1_epochs: u64,
    /// Parsing: the beam of that decoding (α and maximum length are §6.3's).
    pub valid_f1_beam: usize,
    /// Parsing: decode the validation sentences with constrained search (the `constrained`
    /// deviation), so the best checkpoint is picked for constrained parsing.
    pub valid_f1_constrained: bool,
    /// Parsing: at the end of the run, also score the average of the last this many checkpoints
    /// (§6.1's averaging, the final model included) the same way, and keep it as `best.safetensors`
    /// when its validation F1 is higher. 0 or 1: no average is tried.
    pub valid_f1_average: usize,
    /// Matrix products with bf16 operands and f32 sums on AMX or AVX512-BF16 (the `bf16-matmul` departure);
    /// weights, gradients, Adam and every other kernel stay f32. `true`, `false` or `"auto"`.
    pub bf16_matmul: Bf16Matmul,
    /// Parsing: word dropout (the `word-dropout` departure): in training, each source word of
    /// training count c is read as UNK with probability 1/(1 + c), drawn afresh every pass.
    pub word_dropout: bool,
    /// With `data.guided_alignment`: the weight of the alignment loss beside the cross-entropy
    /// (Marian's `--guided-alignment-weight`, 0.1), both summed over the update and divided by
    /// its target tokens.
    pub guided_alignment_weight: f32,
    /// With `data.guided_alignment`: the decoder layer whose first encoder–decoder head is
    /// trained, from 1 (default: the last, Marian's `--transformer-guided-alignment-layer`).
    pub guided_alignment_layer: Option<usize>,
}

impl TrainSection {
    /// How a parsing run's validation F1 decodes (beam `valid_f1_beam`, §6.3's α and length,
    /// `valid_f1_constrained`, too-long sentences skipped): the one definition that picks
    /// `best.safetensors`, and that the quick start decodes its test files with.
    pub fn valid_f1_parse_options(&self) -> crate::decode::ParseOptions {
        let mut popts = crate::decode::ParseOptions {
            skip_long: true,
            constrained: self.valid_f1_constrained,
            ..Default::default()
        };
        popts.decode.search.beam = self.valid_f1_beam;
        popts
    }
}

impl Default for TrainSection {
    /// The paper's recipe (§5.2–5.4: warmup 4000, a checkpoint every 10 minutes, the last 5 kept,
    /// f32) at a small machine's batch size; `output_dir` is empty (a TOML file must give it).
    fn default() -> Self {
        TrainSection {
            output_dir: PathBuf::new(),
            seed: 1,
            max_src_tokens: 4096,
            max_tgt_tokens: 4096,
            accumulate: 1,
            warmup: 4000,
            lr_scale: 1.0,
            max_steps: None,
            max_epochs: None,
            time_limit_minutes: None,
            checkpoint_minutes: 10.0,
            checkpoint_steps: None,
            keep_last: 5,
            valid_steps: None,
            init: None,
            init_optimizer: false,
            valid_f1_epochs: 2,
            valid_f1_beam: 4,
            valid_f1_constrained: false,
            valid_f1_average: 0,
            bf16_matmul: Bf16Matmul::Off,
            word_dropout: false,
            guided_alignment_weight: 0.1,
            guided_alignment_layer: None,
        }
    }
}

/// The fields a TOML file must give, as (section, field): they have no meaningful default.
const REQUIRED: [(&str, &str); 6] = [
    ("data", "train_src"),
    ("data", "train_tgt"),
    ("data", "valid_src"),
    ("data", "valid_tgt"),
    ("data", "bpe"),
    ("train", "output_dir"),
];

/// `train.bf16_matmul`: `false` (f32 products, the paper), `true` (bf16 products; an error on a CPU
/// with no bf16 unit) or `"auto"` (bf16 products where the CPU has a unit, f32 elsewhere, said in the log).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Bf16Matmul {
    /// f32 products.
    #[default]
    Off,
    /// bf16 products, or an error.
    On,
    /// bf16 products where available, else f32.
    Auto,
}

impl Bf16Matmul {
    /// The precision of the run's products, given whether this CPU has a bf16 unit (`Err` says
    /// why not); the choice is logged.
    pub fn precision(self, unit: std::result::Result<(), String>, events: &mut dyn Events) -> Result<Precision> {
        let precision = match (self, unit) {
            (Bf16Matmul::Off, _) => Precision::F32,
            (Bf16Matmul::On, Err(e)) => {
                return Err(Error::Config(format!("train.bf16_matmul = true, but {e}; set it to false or \"auto\"")))
            }
            (Bf16Matmul::Auto, Err(why)) => {
                events.log(&format!("matrix products in f32: train.bf16_matmul = \"auto\" and {why}"));
                Precision::F32
            }
            (Bf16Matmul::On | Bf16Matmul::Auto, Ok(())) => {
                let unit = crate::kernels::cpu::bf16::unit().map_err(Error::Config)?;
                events.log(&format!("matrix products in bf16 with f32 sums ({unit:?}; the bf16-matmul departure)"));
                Precision::Bf16
            }
        };
        Ok(precision)
    }
}

impl Serialize for Bf16Matmul {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Bf16Matmul::Off => s.serialize_bool(false),
            Bf16Matmul::On => s.serialize_bool(true),
            Bf16Matmul::Auto => s.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for Bf16Matmul {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Bool(bool),
            Word(String),
        }
        match Form::deserialize(d)? {
            Form::Bool(true) => Ok(Bf16Matmul::On),
            Form::Bool(false) => Ok(Bf16Matmul::Off),
            Form::Word(w) if w == "auto" => Ok(Bf16Matmul::Auto),
            Form::Word(w) => {
                Err(serde::de::Error::custom(format!("bf16_matmul: expected true, false or \"auto\", got \"{w}\"")))
            }
        }
    }
}

/// A whole run's configuration (the TOML file).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// The model.
    #[serde(default)]
    pub model: ModelSection,
    /// The data.
    pub data: DataSection,
    /// The training recipe.
    pub train: TrainSection,
}

impl RunConfig {
    /// Parses TOML, then applies `overrides` of the form `section.field=value` (value in TOML
    /// syntax; bare words are taken as strings). Errors name the file or the override.
    pub fn from_toml(text: &str, origin: &str, overrides: &[String]) -> Result<RunConfig> {
        let mut doc: toml::Table = text.parse().map_err(|e| Error::Config(format!("{origin}: {e}")))?;
        for o in overrides {
            let (key, value) = o
                .split_once('=')
                .ok_or_else(|| Error::Config(format!("override '{o}': expected section.field=value")))?;
            let (section, field) = key
                .trim()
                .split_once('.')
                .ok_or_else(|| Error::Config(format!("override '{o}': expected section.field=value")))?;
            let value = value.trim();
            let parsed: toml::Value = format!("v = {value}")
                .parse::<toml::Table>()
                .ok()
                .and_then(|t| t.get("v").cloned())
                .unwrap_or_else(|| toml::Value::String(value.to_string()));
            let table = doc.entry(section.to_string()).or_insert_with(|| toml::Value::Table(Default::default()));
            let table = table
                .as_table_mut()
                .ok_or_else(|| Error::Config(format!("override '{o}': {section} is not a section")))?;
            table.insert(field.to_string(), parsed);
        }
        let cfg: RunConfig =
            toml::Value::Table(doc.clone()).try_into().map_err(|e| Error::Config(format!("{origin}: {e}")))?;
        for (section, field) in REQUIRED {
            if cfg.data.task == Task::Parsing && matches!(field, "train_tgt" | "valid_tgt") {
                continue; // parsing reads its targets from the trees
            }
            if !doc.get(section).and_then(|s| s.as_table()).is_some_and(|s| s.contains_key(field)) {
                return Err(Error::Config(format!("{origin}: missing field `{field}`\nin `{section}`\n")));
            }
        }
        // Field names and types are checked now; the preset's name and the values' ranges when the
        // model is built (`model_config`).
        cfg.model.apply(&ModelConfig::base()).map_err(|e| Error::Config(format!("{origin}: {e}")))?;
        Ok(cfg)
    }

    /// The model configuration: the preset with the section's overrides, at `vocab_size`.
    pub fn model_config(&self, vocab_size: usize) -> Result<ModelConfig> {
        let preset = ModelConfig::preset(self.model.preset.as_deref().unwrap_or("base"))?;
        self.model_config_on(&preset, vocab_size, None)
    }

    /// The model configuration on `base` (a preset, or with `train.init` the initial checkpoint's
    /// own configuration: its architecture, an imported model's options included) with the
    /// section's overrides, at the tokenizer's vocabulary sizes (`source_vocab` for separate
    /// vocabularies).
    pub fn model_config_on(
        &self,
        base: &ModelConfig,
        vocab_size: usize,
        source_vocab: Option<usize>,
    ) -> Result<ModelConfig> {
        let mut c = self.model.apply(base).map_err(Error::Config)?;
        (c.vocab_size, c.import.source_vocab_size) = (vocab_size, source_vocab);
        c.validate()?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Positions;

    const MINIMAL: &str = "[data]\ntrain_src = \"a\"\ntrain_tgt = \"b\"\nvalid_src = \"e\"\nvalid_tgt = \"f\"\nbpe = \"c\"\n[train]\noutput_dir = \"d\"\n";

    fn parse(extra: &str, overrides: &[&str]) -> Result<RunConfig> {
        let text = format!("{MINIMAL}{extra}");
        let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        RunConfig::from_toml(&text, "test.toml", &o)
    }

    fn bf16_of(extra: &str, overrides: &[&str]) -> Result<Bf16Matmul> {
        parse(extra, overrides).map(|c| c.train.bf16_matmul)
    }

    #[test]
    fn the_character_encoder_and_word_dropout_need_the_parsing_task() {
        for (set, name) in [("model.char_dim=8", "model.char_dim"), ("train.word_dropout=true", "train.word_dropout")] {
            let cfg = parse("", &[set]).unwrap();
            let model = cfg.model_config(100).unwrap();
            let err = cfg.validate_for(&model, None).unwrap_err().to_string();
            assert!(err.contains(name) && err.contains("data.task = \"parsing\""), "{err}");
        }
    }

    #[test]
    fn bf16_matmul_reads_true_false_and_auto() {
        assert_eq!(bf16_of("", &[]).unwrap(), Bf16Matmul::Off);
        assert_eq!(bf16_of("bf16_matmul = false\n", &[]).unwrap(), Bf16Matmul::Off);
        assert_eq!(bf16_of("bf16_matmul = true\n", &[]).unwrap(), Bf16Matmul::On);
        assert_eq!(bf16_of("bf16_matmul = \"auto\"\n", &[]).unwrap(), Bf16Matmul::Auto);
        // --set: a bare word is a string, true/false are booleans.
        assert_eq!(bf16_of("bf16_matmul = true\n", &["train.bf16_matmul=auto"]).unwrap(), Bf16Matmul::Auto);
        assert_eq!(bf16_of("bf16_matmul = \"auto\"\n", &["train.bf16_matmul=false"]).unwrap(), Bf16Matmul::Off);
        let err = bf16_of("bf16_matmul = \"yes\"\n", &[]).unwrap_err().to_string();
        assert!(err.contains("test.toml") && err.contains("\"auto\"") && err.contains("yes"), "{err}");
        // It round-trips through the serialised form that checkpoints and logs keep.
        for mode in [Bf16Matmul::Off, Bf16Matmul::On, Bf16Matmul::Auto] {
            let v = serde_json::to_value(mode).unwrap();
            assert_eq!(serde_json::from_value::<Bf16Matmul>(v).unwrap(), mode);
        }
    }

    /// `"auto"` falls back to f32 (and says so) when the bf16 unit is forced off; `true` is then
    /// an error; `false` is f32 whatever the CPU has.
    #[test]
    fn bf16_auto_falls_back_to_f32_when_the_unit_is_off() {
        let off: std::result::Result<(), String> = Err("the unit is forced off for this test".into());
        let mut log = Vec::new();
        let p = Bf16Matmul::Auto
            .precision(off.clone(), &mut crate::events::Lines::new(|m: &str| log.push(m.to_string())))
            .unwrap();
        assert_eq!(p, Precision::F32);
        assert!(log.iter().any(|l| l.contains("f32") && l.contains("forced off")), "{log:?}");
        let err = Bf16Matmul::On.precision(off.clone(), &mut ()).unwrap_err().to_string();
        assert!(err.contains("forced off") && err.contains("\"auto\""), "{err}");
        assert_eq!(Bf16Matmul::Off.precision(off, &mut ()).unwrap(), Precision::F32);
        if crate::kernels::cpu::bf16::available().is_ok() {
            assert_eq!(Bf16Matmul::Auto.precision(Ok(()), &mut ()).unwrap(), Precision::Bf16);
        }
    }

    #[test]
    fn data_task_defaults_to_translation_and_names_the_choices() {
        let read = |extra: &str| RunConfig::from_toml(MINIMAL, "t.toml", &[extra.to_string()]);
        assert_eq!(RunConfig::from_toml(MINIMAL, "t.toml", &[]).unwrap().data.task, Task::Translation);
        assert_eq!(read("data.task=translation").unwrap().data.task, Task::Translation);
        assert_eq!(read("data.task=parsing").unwrap().data.task, Task::Parsing);
        let err = read("data.task=parse").unwrap_err().to_string();
        assert!(err.contains("parsing") && err.contains("translation"), "{err}");
    }

    #[test]
    fn silver_trees_are_for_parsing_and_gold_repeat_needs_them() {
        let read = |extra: &[&str]| {
            let o: Vec<String> = extra.iter().map(|x| x.to_string()).collect();
            RunConfig::from_toml(MINIMAL, "t.toml", &o).and_then(|c| c.validate().map(|()| c))
        };
        let err = read(&["data.silver_src=s.mrg"]).unwrap_err().to_string();
        assert!(err.contains("data.silver_src") && err.contains("applies to task = \"parsing\" only"), "{err}");
        let parsing = ["data.task=parsing", "data.train_tgt=", "data.valid_tgt="];
        let err = read(&[&parsing[..], &["data.gold_repeat=3"]].concat()).unwrap_err().to_string();
        assert!(err.contains("data.gold_repeat = 3") && err.contains("data.silver_src"), "{err}");
        let err =
            read(&[&parsing[..], &["data.silver_src=s.mrg", "data.gold_repeat=0"]].concat()).unwrap_err().to_string();
        assert!(err.contains("data.gold_repeat = 0 must be between 1 and 1000"), "{err}");
        let err =
            read(&[&parsing[..], &["data.silver_src=s.mrg", "data.train_bin=prep"]].concat()).unwrap_err().to_string();
        assert!(err.contains("data.silver_src with data.train_bin"), "{err}");
        let c = read(&[&parsing[..], &["data.silver_src=s.mrg", "data.gold_repeat=4"]].concat()).unwrap();
        assert_eq!((c.data.silver_src.as_deref(), c.data.gold_repeat), (Some(std::path::Path::new("s.mrg")), 4));
    }

    #[test]
    fn shipped_configs_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let text = std::fs::read_to_string(&path).unwrap();
                RunConfig::from_toml(&text, &path.display().to_string(), &[])
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                n += 1;
            }
        }
        assert!(n >= 2, "found {n} configs in {}", dir.display());
    }

    #[test]
    fn defaults_are_those_documented() {
        let c = parse("", &[]).unwrap();
        let (d, t) = (&c.data, &c.train);
        assert_eq!((d.vocab_size, d.max_tokens, d.max_ratio, d.train_bin.as_ref()), (8000, 250, 3.0, None));
        assert_eq!((t.seed, t.max_src_tokens, t.max_tgt_tokens, t.accumulate), (1, 4096, 4096, 1));
        assert_eq!((t.warmup, t.lr_scale, t.checkpoint_minutes, t.keep_last), (4000, 1.0, 10.0, 5));
        assert_eq!(
            (t.max_steps, t.max_epochs, t.time_limit_minutes, t.checkpoint_steps, t.valid_steps),
            Default::default()
        );
        assert_eq!(t.output_dir, PathBuf::from("d"));
        assert_eq!(c.model_config(1000).unwrap(), ModelConfig { vocab_size: 1000, ..ModelConfig::base() });
    }

    #[test]
    fn required_fields_stay_required() {
        for (section, field) in REQUIRED {
            let text = MINIMAL.replace(&format!("{field} = "), "# ");
            let err = RunConfig::from_toml(&text, "test.toml", &[]).unwrap_err().to_string();
            assert!(err.contains(&format!("test.toml: missing field `{field}`\nin `{section}`")), "{err}");
        }
        let err = RunConfig::from_toml("[data]\n", "test.toml", &[]).unwrap_err().to_string();
        assert!(err.contains("missing field `train`"), "{err}");
    }

    #[test]
    fn model_fields_override_the_preset() {
        let c = parse(
            "[model]\npreset = \"big\"\nd_ff = 64\ndropout = 0\npositions = \"learned\"\n",
            &["model.n_layers=2"],
        )
        .unwrap();
        let m = c.model_config(500).unwrap();
        let expected = ModelConfig {
            d_ff: 64,
            dropout: 0.0,
            positions: Positions::Learned,
            n_layers: 2,
            vocab_size: 500,
            ..ModelConfig::big()
        };
        assert_eq!(m, expected);
        // Values that are in no preset come through exactly (f32 through TOML's f64 and back).
        let m = parse("", &["model.label_smoothing=0.15", "model.attention_dropout=0.1"])
            .unwrap()
            .model_config(500)
            .unwrap();
        assert_eq!((m.label_smoothing, m.attention_dropout), (0.15f32, 0.1f32));
        // Ranges are checked when the model is built, as is the preset's name.
        let err = parse("", &["model.dropout=1.5"]).unwrap().model_config(500).unwrap_err().to_string();
        assert!(err.contains("dropout = 1.5 must lie in [0, 1)"), "{err}");
        let err = parse("", &["model.preset=zz"]).unwrap().model_config(500).unwrap_err().to_string();
        assert!(err.contains("unknown preset 'zz'"), "{err}");
    }

    #[test]
    fn unknown_fixed_and_mistyped_model_fields_are_errors() {
        for key in ["foo", "vocab_size", "layer_norm_eps", "source_vocab_size"] {
            let err = parse("", &[&format!("model.{key}=1")]).unwrap_err().to_string();
            assert!(err.contains(&format!("test.toml: unknown field `{key}`, expected one of `preset`")), "{err}");
            let list = "`preset`, `n_layers`, `d_model`, `d_ff`, `n_heads`, `d_k`, `d_v`, `dropout`, \
                        `attention_dropout`, `label_smoothing`, `positions`, `max_positions`, `source_pointer`, `next_closer`, \
                        `next_closer_depth`, `next_closer_dropout`, `char_dim`, `activation`, `output_bias`, \
                        `sinusoid_layout`, `scale_embedding`\nin `model`";
            assert!(err.contains(list), "{err}");
            let expected = err.split("expected one of").nth(1).unwrap();
            assert!(
                !expected.contains("`vocab_size`")
                    && !expected.contains("layer_norm_eps")
                    && !expected.contains("source_vocab_size"),
                "{err}"
            );
        }
        let err = parse("[model]\nd_model = \"wide\"\n", &[]).unwrap_err().to_string();
        assert!(err.contains("test.toml: invalid type: string \"wide\", expected usize\nin `model.d_model`"), "{err}");
        let err = parse("", &["model.positions=abc"]).unwrap_err().to_string();
        assert!(err.contains("unknown variant `abc`") && err.contains("model.positions"), "{err}");
        let err = parse("", &["model.n_layers=-3"]).unwrap_err().to_string();
        assert!(err.contains("invalid value: integer `-3`, expected usize"), "{err}");
    }
}
