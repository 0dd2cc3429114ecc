//! A native Marian model (a `.npz` of tensors with its `special:model.yml`, `decoder.yml` naming
//! the vocabularies, `.yml` or `.spm` vocabularies, `source.spm` / `target.spm`) read into the
//! neutral [`ForeignModel`]: the architecture from the model's YAML with Marian's defaults, each
//! option this engine does not run refused by name, the vocabularies with `<pad>` appended, the
//! tensors under Marian's names.

use super::foreign::{activation, err, Architecture, ForeignModel, Names, Side, Tensors, TokenizerParts, Vocab};
use crate::config::{Activation, SinusoidLayout};
use crate::data::sentencepiece::SentencePiece;
use crate::error::Result;
use crate::import::files::{read_spm, read_text};
use crate::import::npz::{read_npz, Array};
use crate::import::yaml;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Reads the native Marian model in `dir`.
pub(super) fn read(dir: &Path) -> Result<ForeignModel> {
    let npz_path = find_npz(dir)?.ok_or_else(|| err(dir, "no .npz model"))?;
    let mut arrays = read_npz(&npz_path)?;
    let y = yaml::parse(&model_yml(&mut arrays, &npz_path)?);
    let y = ModelYml { y: &y, path: &npz_path };
    check_supported(&y)?;
    let a = shape(&y)?;
    let v = vocabularies(dir, &npz_path, a.tied_all)?;
    let architecture = architecture(&y, &a)?;
    let tensors = arrays
        .into_iter()
        .filter_map(|(k, a)| match a {
            Array::Float(t) => Some((k, t)),
            Array::Bytes(_) => None,
        })
        .collect();
    // The SentencePiece models: the vocabularies themselves where they are ones (Marian's own
    // training output), else the release names beside the model.
    let spm = |vocab: &Path, names: &[&str]| -> Result<Vec<u8>> {
        let p = Some(vocab.to_path_buf())
            .filter(|v| is_spm(v))
            .or_else(|| names.iter().map(|n| dir.join(n)).find(|p| p.is_file()));
        let p = p.ok_or_else(|| err(dir, format!("no SentencePiece model ({})", names.join(" or "))))?;
        read_spm(&p)
    };
    let tokenizer = TokenizerParts {
        source_spm: spm(&v.paths[0], &["source.spm", "source.model"])?,
        target_spm: spm(&v.paths[1], &["target.spm", "target.model"])?,
        source_vocab: v.source,
        target_vocab: v.target,
        eos: "</s>".into(),
        unk: "<unk>".into(),
        pad: "<pad>".into(),
    };
    Ok(ForeignModel {
        dir: dir.to_path_buf(),
        format: "marian-npz",
        architecture,
        target: v.target_side,
        source: v.source_side,
        tensors: Tensors { map: tensors, path: npz_path },
        names: names(a.layers),
        output_bias: "decoder_ff_logit_out_b".into(),
        // Marian stores matrices (in, out): y = x·W.
        transposed: true,
        tokenizer,
    })
}

/// The model's own YAML: `special:model.yml` inside the archive (YAML text then one or more NULs,
/// Marian reads up to the first), else the `.yml` beside the `.npz`.
fn model_yml(arrays: &mut BTreeMap<String, Array>, npz_path: &Path) -> Result<String> {
    Ok(match arrays.remove("special:model.yml") {
        Some(Array::Bytes(b)) => String::from_utf8_lossy(b.split(|&c| c == 0).next().unwrap_or(&[])).to_string(),
        Some(Array::Float(t)) => {
            return Err(err(
                npz_path,
                format!(
                    "special:model.yml is stored as numbers (shape {:?}), not as the bytes of its YAML text \
                     (int8, uint8 or a byte string, as Marian writes it)",
                    t.shape
                ),
            ))
        }
        _ => match npz_path.with_extension("yml") {
            p if p.is_file() => read_text(&p, "a model YAML file")?,
            _ => return Err(err(npz_path, "no special:model.yml inside it and no model .yml beside it")),
        },
    })
}

/// The model's YAML settings, read with Marian's defaults; errors name the `.npz`.
struct ModelYml<'a> {
    y: &'a BTreeMap<String, Vec<String>>,
    path: &'a Path,
}

impl ModelYml<'_> {
    fn get(&self, k: &str) -> Option<&str> {
        self.y.get(k).and_then(|v| v.first()).map(String::as_str)
    }
    fn num(&self, k: &str, default: usize) -> Result<usize> {
        match self.get(k) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| err(self.path, format!("model.yml: {k} = {v:?} is not a number"))),
        }
    }
    fn yes(&self, k: &str) -> bool {
        self.get(k) == Some("true")
    }
}

/// What Marian's `gelu` computed in the version that wrote a model (model.yml's `version`, e.g.
/// "v1.12.42 b7be0e964 2025-05-24"): x·σ(1.702x) up to v1.12.2, the exact x·Φ(x) from v1.12.3
/// (marian-dev d225c24d, "Implemented fully correct version of GELU"). A model without a readable
/// version predates the field, so it has the old form.
fn marian_gelu(version: Option<&str>) -> Activation {
    let number = version.and_then(|v| v.split_whitespace().next()).map(|v| v.trim_start_matches('v'));
    let parts: Option<Vec<u32>> = number.and_then(|n| n.split('.').map(|p| p.parse().ok()).collect());
    match parts.as_deref() {
        Some([major, minor, patch, ..]) if (*major, *minor, *patch) >= (1, 12, 3) => Activation::Gelu,
        Some([major, minor]) if (*major, *minor) > (1, 12) => Activation::Gelu,
        _ => Activation::GeluSigmoid,
    }
}

/// Refuses, by name, each Marian option that makes a model other than the paper's post-norm
/// Transformer with a 2-layer FFN.
fn check_supported(y: &ModelYml) -> Result<()> {
    check_keys(y)?;
    let npz_path = y.path;
    let kind = y.get("type").unwrap_or("transformer");
    if kind != "transformer" {
        return Err(err(npz_path, format!("model type {kind:?}: only Marian's transformer is read")));
    }
    for (k, want) in [
        ("transformer-postprocess", "dan"),
        ("transformer-preprocess", ""),
        ("transformer-decoder-autoreg", "self-attention"),
    ] {
        let v = y.get(k).unwrap_or(want);
        if v != want {
            return Err(err(
                npz_path,
                format!("{k}: {v:?} is not supported (the paper's post-norm layer wants {want:?})"),
            ));
        }
    }
    if let Some(v) = y.get("transformer-postprocess-emb").filter(|v| !v.is_empty() && *v != "d") {
        return Err(err(npz_path, format!("transformer-postprocess-emb: {v:?} (only dropout, \"d\", is supported)")));
    }
    if y.num("transformer-ffn-depth", 2)? != 2 || ![0, 2].contains(&y.num("transformer-decoder-ffn-depth", 0)?) {
        return Err(err(npz_path, "an FFN depth other than 2 is not supported"));
    }
    for k in [
        "right-left",
        "layer-normalization",
        "transformer-no-projection",
        "transformer-train-position-embeddings",
        "transformer-disable-position-embeddings",
    ] {
        if y.yes(k) {
            return Err(err(npz_path, format!("{k}: true is not supported")));
        }
    }
    if y.get("transformer-postprocess-top").is_some_and(|v| !v.is_empty()) {
        return Err(err(npz_path, "transformer-postprocess-top (a final LayerNorm) is not supported"));
    }
    let dec_ffn = y.num("transformer-decoder-dim-ffn", 0)?;
    if dec_ffn != 0 && dec_ffn != y.num("transformer-dim-ffn", 2048)? {
        return Err(err(npz_path, format!("transformer-decoder-dim-ffn {dec_ffn} differs from the encoder's")));
    }
    if y.get("transformer-tied-layers").is_some_and(|v| !v.is_empty())
        || y.y.keys().any(|k| k.starts_with("transformer-aan"))
            && y.get("transformer-decoder-autoreg") == Some("average-attention")
    {
        return Err(err(npz_path, "tied layers or average attention are not supported"));
    }
    Ok(())
}

/// The `model.yml` keys this import reads (`check_supported`, `shape`, `architecture`).
const READ_KEYS: [&str; 26] = [
    "type",
    "transformer-postprocess",
    "transformer-preprocess",
    "transformer-decoder-autoreg",
    "transformer-postprocess-emb",
    "transformer-ffn-depth",
    "transformer-decoder-ffn-depth",
    "right-left",
    "layer-normalization",
    "transformer-no-projection",
    "transformer-train-position-embeddings",
    "transformer-disable-position-embeddings",
    "transformer-postprocess-top",
    "transformer-decoder-dim-ffn",
    "transformer-dim-ffn",
    "transformer-tied-layers",
    "dim-emb",
    "enc-depth",
    "dec-depth",
    "transformer-heads",
    "tied-embeddings-all",
    "tied-embeddings-src",
    "tied-embeddings",
    "max-length",
    "transformer-ffn-activation",
    "version",
];

/// Keys that do not change what a `type: transformer` model with self-attention decoding computes:
/// the vocabulary sizes (the rows come from the tensors), the training-only alignment layer, and
/// the options of other model types (RNN cells, average attention, which `check_supported`
/// refuses when it is on, BERT's) that Marian writes into every model's YAML.
const HARMLESS_KEYS: [&str; 19] = [
    "dim-vocabs",
    "transformer-guided-alignment-layer",
    "dec-cell",
    "dec-cell-base-depth",
    "dec-cell-high-depth",
    "enc-cell",
    "enc-cell-depth",
    "enc-type",
    "dim-rnn",
    "skip",
    "transformer-rnn-projection",
    "transformer-aan-activation",
    "transformer-aan-depth",
    "transformer-aan-nogate",
    "transformer-dim-aan",
    "bert-train-type-embeddings",
    "bert-type-vocab-size",
    "separator-symbol",
    "factors-combine",
];

/// Keys that are harmless only at Marian's "off" value, which every model of the paper's kind has.
const OFF_KEYS: [(&str, &str); 15] = [
    ("transformer-attention-mask", "default"),
    ("transformer-alibi-shift", "false"),
    ("transformer-alibi-trainable", "false"),
    ("transformer-pool", "false"),
    ("transformer-no-bias", "false"),
    ("transformer-no-affine", "false"),
    ("factors-dim-emb", "0"),
    ("lemma-dim-emb", "0"),
    ("lemma-dependency", ""),
    ("ulr", "false"),
    ("ulr-dim-emb", "0"),
    ("ulr-trainable-transformation", "false"),
    ("input-types", ""),
    ("output-omit-bias", "false"),
    ("special-vocab", ""),
];

/// Refuses every `model.yml` key that is neither read, nor known not to change the function, nor
/// at its off value: an option this import does not compute is an error naming it, never a
/// different model imported in silence.
fn check_keys(y: &ModelYml) -> Result<()> {
    let mut unknown = Vec::new();
    for (k, v) in y.y {
        let k = k.as_str();
        if READ_KEYS.contains(&k) || HARMLESS_KEYS.contains(&k) {
            continue;
        }
        let val = v.first().map_or("", String::as_str);
        match OFF_KEYS.iter().find(|(name, _)| *name == k) {
            Some((_, off)) if val == *off => {}
            Some((_, off)) => {
                return Err(err(
                    y.path,
                    format!("model.yml: {k}: {val:?} is not supported (only {off:?}, Marian's off value)"),
                ))
            }
            None => unknown.push(k),
        }
    }
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(err(
            y.path,
            format!(
                "model.yml options this import does not know, which may change what the model computes: {}",
                unknown.join(", ")
            ),
        ))
    }
}

/// The model's shape, from its YAML.
struct Shape {
    d: usize,
    layers: usize,
    heads: usize,
    ffn: usize,
    /// One embedding (`Wemb`) serves encoder and decoder: `tied-embeddings-all` or `-src`.
    tied_all: bool,
}

fn shape(y: &ModelYml) -> Result<Shape> {
    let npz_path = y.path;
    let d = y.num("dim-emb", 512)?;
    let (el, dl) = (y.num("enc-depth", 6)?, y.num("dec-depth", 6)?);
    let heads = y.num("transformer-heads", 8)?;
    let ffn = y.num("transformer-dim-ffn", 2048)?;
    // Every count is bounded before anything is built from it (the layers' names, the shapes):
    // the engine's own limits (config.rs), checked here with the file named.
    for (key, v, max) in [
        ("enc-depth", el, crate::config::MAX_LAYERS),
        ("dec-depth", dl, crate::config::MAX_LAYERS),
        ("dim-emb", d, crate::config::MAX_D_MODEL),
        ("transformer-heads", heads, crate::config::MAX_D_MODEL),
        ("transformer-dim-ffn", ffn, crate::config::MAX_D_FF),
        ("max-length", y.num("max-length", 0)?, crate::config::MAX_POSITIONS),
    ] {
        if v > max {
            return Err(err(
                npz_path,
                format!("model.yml: {key} {v} is beyond what this engine builds (at most {max})"),
            ));
        }
    }
    if el != dl {
        return Err(err(
            npz_path,
            format!("encoder depth {el} and decoder depth {dl} differ: this engine's stacks are equal"),
        ));
    }
    if heads == 0 || d % heads != 0 {
        return Err(err(npz_path, format!("dim-emb {d} is not a multiple of the {heads} heads")));
    }
    // Wemb serves encoder and decoder with tied-embeddings-all or -src; the output projection is
    // the decoder's embedding with tied-embeddings(-all).
    let tied_all = y.yes("tied-embeddings-all") || y.yes("tied-embeddings-src");
    if !y.yes("tied-embeddings-all") && !y.yes("tied-embeddings") {
        return Err(err(
            npz_path,
            "an untied output layer (decoder_ff_logit_out_Wt; tied-embeddings: false) is not supported",
        ));
    }
    Ok(Shape { d, layers: el, heads, ffn, tied_all })
}

/// The vocabularies (`<pad>` appended) and the sides they make.
struct Vocabularies {
    /// Where they were read (source, target).
    paths: [PathBuf; 2],
    source: Vocab,
    target: Option<Vocab>,
    target_side: Side,
    source_side: Option<Side>,
}

/// Reads the source and target vocabularies where [`vocab_paths`] finds them.
fn vocabularies(dir: &Path, npz_path: &Path, tied_all: bool) -> Result<Vocabularies> {
    let paths = vocab_paths(dir)?;
    // Marian's decoder starts from a zero vector; the import gives it an id of its own, `<pad>`
    // after the last (a zero row whose logit is masked), as Hugging Face's converter does.
    let with_pad = |mut v: Vocab| {
        if v.id("<pad>").is_none() {
            v.pieces.push("<pad>".into());
        }
        v
    };
    let (source, target) = (marian_vocab(&paths[0])?, marian_vocab(&paths[1])?);
    // The embeddings' rows: the vocabularies as Marian has them.
    let (v_src, v_tgt) = (source.len(), target.len());
    // Two files with the same pieces are one vocabulary.
    let separate = source != target;
    if !tied_all && !separate {
        return Err(err(
            npz_path,
            "separate source and target embeddings (encoder_Wemb, decoder_Wemb) over one vocabulary are not supported",
        ));
    }
    let source = with_pad(source);
    let target = if separate { Some(with_pad(target)) } else { None };
    if tied_all && separate && target.as_ref() != Some(&source) {
        return Err(err(npz_path, "tied-embeddings-all with two different vocabularies"));
    }
    let own_source = separate && !tied_all;
    let (teos, tunk, tpad) = special_ids(target.as_ref().unwrap_or(&source), &paths[1])?;
    let target_embedding = if own_source { ["decoder_Wemb", "Wemb"] } else { ["Wemb", "decoder_Wemb"] };
    let target_side = Side {
        ids: target.as_ref().unwrap_or(&source).pieces.len(),
        start: Some(tpad),
        eos: teos,
        unk: tunk,
        rows: v_tgt,
        embedding: target_embedding.map(String::from).to_vec(),
    };
    let source_side = if own_source {
        let (eos, unk, pad) = special_ids(&source, &paths[0])?;
        let embedding = vec!["encoder_Wemb".to_string()];
        Some(Side { ids: source.pieces.len(), start: Some(pad), eos, unk, rows: v_src, embedding })
    } else {
        None
    };
    Ok(Vocabularies { paths, source, target, target_side, source_side })
}

/// The vocabularies' paths (source, target), found as Marian's decoder finds them: `decoder.yml`'s
/// two `vocabs` ([`resolve`]); else by the names releases use: `vocab.yml` for both, one
/// `*.vocab.yml` (OPUS-MT), `vocab.src.yml` and `vocab.trg.yml`, or `source.spm` and `target.spm`.
fn vocab_paths(dir: &Path) -> Result<[PathBuf; 2]> {
    if let Some(dec) = decoder_yml(dir)? {
        let y = read_yaml(&dec)?;
        if let Some(v) = y.get("vocabs").filter(|v| v.len() == 2) {
            return Ok([resolve(dir, &dec, &v[0])?, resolve(dir, &dec, &v[1])?]);
        }
    }
    let named: Vec<PathBuf> = files_ending(dir, ".vocab.yml")?;
    let candidates: [(PathBuf, PathBuf); 3] = [
        (dir.join("vocab.yml"), dir.join("vocab.yml")),
        (dir.join("vocab.src.yml"), dir.join("vocab.trg.yml")),
        (dir.join("source.spm"), dir.join("target.spm")),
    ];
    if let [one] = named.as_slice() {
        return Ok([one.clone(), one.clone()]);
    }
    match candidates.into_iter().find(|(s, t)| s.is_file() && t.is_file()) {
        Some((s, t)) => Ok([s, t]),
        None => Err(err(
            dir,
            format!(
                "no vocabularies: looked for decoder.yml's `vocabs`, vocab.yml, one *.vocab.yml ({} found), \
                 vocab.src.yml and vocab.trg.yml, source.spm and target.spm",
                named.len()
            ),
        )),
    }
}

/// A file `decoder.yml` (at `dec`, in `dir`) names. Marian writes the paths as they were where it
/// ran, which need not be here, so the file beside the model wins: the path inside the directory
/// when it stays inside (no `..`, not absolute), else the file of that name in the directory, and
/// only then an absolute or parent path as Marian's decoder follows it. An error names all three.
fn resolve(dir: &Path, dec: &Path, entry: &str) -> Result<PathBuf> {
    let p = Path::new(entry);
    let inside = p.components().all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir));
    // Last, the path as Marian follows it: relative to the model's directory (an absolute one as it is).
    let candidates = [inside.then(|| dir.join(p)), p.file_name().map(|n| dir.join(n)), (!inside).then(|| dir.join(p))];
    candidates.into_iter().flatten().find(|c| c.is_file()).ok_or_else(|| {
        err(dec, format!("names {entry:?}, which is neither a file in {} nor one of that name there", dir.display()))
    })
}

/// The decoder configuration of a directory: `decoder.yml` (the release name), else the one
/// `*.decoder.yml` there (Marian's trainer writes `MODEL.npz.decoder.yml` beside the model); an
/// error when there are several and no `decoder.yml` to choose.
fn decoder_yml(dir: &Path) -> Result<Option<PathBuf>> {
    let plain = dir.join("decoder.yml");
    if plain.is_file() {
        return Ok(Some(plain));
    }
    let mut found = files_ending(dir, ".decoder.yml")?;
    match found.len() {
        0 | 1 => Ok(found.pop()),
        n => Err(err(
            dir,
            format!(
                "{n} *.decoder.yml files ({}): copy the one to use to decoder.yml",
                found.iter().filter_map(|p| p.file_name()).map(|n| n.to_string_lossy()).collect::<Vec<_>>().join(", ")
            ),
        )),
    }
}

/// The files in `dir` whose names end with `suffix`, sorted.
fn files_ending(dir: &Path, suffix: &str) -> Result<Vec<PathBuf>> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(crate::io::io_err(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(suffix)))
        .collect();
    found.sort();
    Ok(found)
}

/// (`</s>`, `<unk>`, `<pad>`) ids of a vocabulary with `<pad>` appended; errors name its `path`.
fn special_ids(v: &Vocab, path: &Path) -> Result<(u32, u32, u32)> {
    let eos = v.id("</s>").ok_or_else(|| err(path, "no </s> in the vocabulary"))?;
    let unk = v.id("<unk>").ok_or_else(|| err(path, "no <unk> in the vocabulary"))?;
    Ok((eos, unk, v.id("<pad>").expect("appended")))
}

/// The architecture of the model's YAML: Marian's LayerNorm ε 1e-6, its sinusoid layout, and
/// embeddings always scaled.
fn architecture(y: &ModelYml, a: &Shape) -> Result<Architecture> {
    Ok(Architecture {
        layers: a.layers,
        d_model: a.d,
        heads: a.heads,
        d_ff: a.ffn,
        max_positions: y.num("max-length", 0)?.max(1024),
        layer_norm_eps: 1e-6,
        activation: match y.get("transformer-ffn-activation").unwrap_or("swish") {
            "gelu" => marian_gelu(y.get("version")),
            other => activation(other, y.path)?,
        },
        sinusoid_layout: SinusoidLayout::Marian,
        scale_embedding: true,
        learned_positions: None,
    })
}

/// Marian's names of our layers' tensors (`encoder_l1_self_Wq` …).
pub(super) fn names(n_layers: usize) -> Names {
    let mut map = HashMap::new();
    for side in ["encoder", "decoder"] {
        for i in 0..n_layers {
            let (ours, m) = (format!("{side}.layers.{i}"), format!("{side}_l{}", i + 1));
            let mut attn = vec![("self_attn", "self")];
            if side == "decoder" {
                attn.push(("cross_attn", "context"));
            }
            for (a, k) in attn {
                for w in ["q", "k", "v", "o"] {
                    map.insert(format!("{ours}.{a}.w_{w}"), format!("{m}_{k}_W{w}"));
                    map.insert(format!("{ours}.{a}.b_{w}"), format!("{m}_{k}_b{w}"));
                }
                map.insert(format!("{ours}.{a}_norm.gamma"), format!("{m}_{k}_Wo_ln_scale"));
                map.insert(format!("{ours}.{a}_norm.beta"), format!("{m}_{k}_Wo_ln_bias"));
            }
            for (o, k) in [("w_1", "W1"), ("b_1", "b1"), ("w_2", "W2"), ("b_2", "b2")] {
                map.insert(format!("{ours}.ffn.{o}"), format!("{m}_ffn_{k}"));
            }
            map.insert(format!("{ours}.ffn_norm.gamma"), format!("{m}_ffn_ffn_ln_scale"));
            map.insert(format!("{ours}.ffn_norm.beta"), format!("{m}_ffn_ffn_ln_bias"));
        }
    }
    Names { map }
}

/// The model of a native Marian directory: the one `decoder.yml` names, otherwise the one `.npz`
/// there (`None` when there is none).
pub(super) fn find_npz(dir: &Path) -> Result<Option<PathBuf>> {
    if let Some(dec) = decoder_yml(dir)? {
        let y = read_yaml(&dec)?;
        if let Some(m) = y.get("models").and_then(|m| m.first()) {
            return resolve(dir, &dec, m).map(Some);
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(crate::io::io_err(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "npz") && p.is_file())
        .collect();
    found.sort();
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(err(dir, format!("{} .npz files and no decoder.yml to say which is the model", found.len()))),
    }
}

fn read_yaml(path: &Path) -> Result<BTreeMap<String, Vec<String>>> {
    let text = read_text(path, "a YAML file")?;
    Ok(yaml::parse(&text))
}

/// A Marian vocabulary: `.yml` (`piece: id` per line) or `.spm` (the SentencePiece model's own
/// pieces and ids).
/// Whether a vocabulary file is a SentencePiece model (`.spm`, `.model`), not a `.yml` list.
fn is_spm(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "spm" || e == "model")
}

fn marian_vocab(path: &Path) -> Result<Vocab> {
    if is_spm(path) {
        let sp = SentencePiece::from_bytes(&read_spm(path)?)?;
        let pieces = (0..sp.len() as u32).map(|i| sp.id_to_piece(i).unwrap_or_default().to_string()).collect();
        return Ok(Vocab { pieces });
    }
    parse_yml_vocab(&read_text(path, "a vocabulary")?, path)
}

/// [`Vocab`] from the text of a Marian `.yml` vocabulary (`piece: id` lines, ids 0..n); `path`
/// names the file in errors.
pub fn parse_yml_vocab(text: &str, path: &Path) -> Result<Vocab> {
    let mut pieces: Vec<Option<String>> = Vec::new();
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    // Ids run 0..n, one a line, so none can reach the number of lines.
    let lines = text.lines().count();
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_end();
        if t.trim().is_empty() || t.starts_with('#') {
            continue;
        }
        let (k, v) = t.rsplit_once(':').ok_or_else(|| err(path, format!("line {}: not `piece: id`", n + 1)))?;
        // Never quote the line: this may be a file that is not a vocabulary at all.
        let id: usize = v.trim().parse().map_err(|_| {
            err(path, format!("line {}: not `piece: id` (what follows the last ':' is not a whole number): not a Marian vocabulary", n + 1))
        })?;
        if id >= lines {
            return Err(err(
                path,
                format!("line {}: id {id} is beyond the file's {lines} lines (ids must run 0..n without gaps)", n + 1),
            ));
        }
        if pieces.len() <= id {
            pieces.resize(id + 1, None);
        }
        if pieces[id].is_some() {
            return Err(err(path, format!("line {}: id {id} given twice", n + 1)));
        }
        let piece = yaml::unquote_checked(k.trim()).map_err(|m| err(path, format!("line {}: {m}", n + 1)))?;
        if let Some(first) = seen.insert(piece.clone(), n + 1) {
            return Err(err(path, format!("line {}: the piece of line {first} again (each piece has one id)", n + 1)));
        }
        pieces[id] = Some(piece);
    }
    let pieces: Option<Vec<String>> = pieces.into_iter().collect();
    pieces.map(|pieces| Vocab { pieces }).ok_or_else(|| err(path, "its ids are not 0..n without gaps"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marians_gelu_is_the_sigmoid_form_up_to_1_12_2_and_exact_after() {
        for (version, want) in [
            (Some("v1.12.42 b7be0e964 2025-05-24 22:34:42 -0700"), Activation::Gelu),
            (Some("v1.12.3 d225c24d 2023-03-01"), Activation::Gelu),
            (Some("v1.13.0"), Activation::Gelu),
            (Some("v2.0"), Activation::Gelu),
            (Some("v1.12.2 a23cc77e 2023-02-27"), Activation::GeluSigmoid),
            (Some("v1.12.0 65bf82ff 2023-02-21"), Activation::GeluSigmoid),
            (Some("v1.9.56 b0ed3bcb 2020-08-19"), Activation::GeluSigmoid),
            (Some("not a version"), Activation::GeluSigmoid),
            (None, Activation::GeluSigmoid),
        ] {
            assert_eq!(marian_gelu(version), want, "{version:?}");
        }
    }
}
