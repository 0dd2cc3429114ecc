//! Every shipped configuration in `configs/` parses, passes validation and resolves to a model
//! configuration (at its own vocabulary size), so a recipe in the README never meets a config
//! error after its data is prepared. The shapes of the paper's recipes are checked against §5, and
//! the quick starts' built-in recipes against the files.

use std::path::Path;
use transformer::train::run::RunConfig;

fn configs() -> Vec<(String, RunConfig)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let text = std::fs::read_to_string(&p).unwrap();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let cfg = RunConfig::from_toml(&text, &name, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
            cfg.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
            out.push((name, cfg));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn every_shipped_config_parses_validates_and_resolves() {
    let all = configs();
    let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
    for expected in [
        "multi30k-en-de.toml",
        "ptb-parse-paper.toml",
        "ptb-parse.toml",
        "tiny-test.toml",
        "wmt14-en-de-base.toml",
        "wmt14-en-de-big.toml",
        "wmt14-en-fr-big.toml",
    ] {
        assert!(names.contains(&expected), "{expected} missing from {names:?}");
    }
    for (name, cfg) in &all {
        let model = cfg.model_config(cfg.data.vocab_size).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(model.vocab_size, cfg.data.vocab_size, "{name}");
    }
    // The built-in copy of multi30k-en-de.toml that quickstart trains is the file itself.
    let shipped =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/multi30k-en-de.toml"));
    assert_eq!(shipped.unwrap(), transformer::recipes::MULTI30K_CONFIG);
    // So is the parsing quick start's, whose default split is the config's.
    use transformer::data::ptb_sample::SAMPLE_SPLIT;
    use transformer::recipes::parsing::PTB_PARSE_CONFIG;
    let shipped = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/ptb-parse.toml"));
    assert_eq!(shipped.unwrap(), PTB_PARSE_CONFIG);
    let ptb = &all.iter().find(|(n, _)| n == "ptb-parse.toml").unwrap().1;
    assert_eq!(ptb.data.train_files.as_deref(), Some(SAMPLE_SPLIT[0]));
    assert_eq!(ptb.data.valid_files.as_deref(), Some(SAMPLE_SPLIT[1]));
    // The parsing configs read the treebank where `transformer data ptb-sample` puts it, inside the
    // repository, never from a path a user's clone lacks.
    for (name, cfg) in all.iter().filter(|(n, _)| n.starts_with("ptb-parse")) {
        let dir = Path::new(transformer::data::ptb_sample::PTB_SAMPLE_DIR);
        assert_eq!((cfg.data.train_src.as_path(), cfg.data.valid_src.as_path()), (dir, dir), "{name}");
    }
}

#[test]
fn the_wmt14_recipes_are_the_papers() {
    let all = configs();
    let get = |n: &str| &all.iter().find(|(name, _)| name == n).unwrap().1;
    // (file, preset, d_model, P_drop, vocabulary, steps, checkpoints averaged): §5.1, §5.2, §6.1
    // (the big English→French model's P_drop 0.1, and its 32,000-entry vocabulary).
    for (name, preset, d_model, dropout, vocab, steps, keep) in [
        ("wmt14-en-de-base.toml", "base", 512, 0.1, 37000, 100_000, 5),
        ("wmt14-en-de-big.toml", "big", 1024, 0.3, 37000, 300_000, 20),
        ("wmt14-en-fr-big.toml", "big", 1024, 0.1, 32000, 300_000, 20),
    ] {
        let c = get(name);
        let m = c.model_config(c.data.vocab_size).unwrap();
        assert_eq!(c.model.preset.as_deref(), Some(preset), "{name}");
        assert_eq!((m.n_layers, m.d_model, m.dropout, m.label_smoothing), (6, d_model, dropout, 0.1), "{name}");
        assert_eq!(c.data.vocab_size, vocab, "{name}: §5.1's shared vocabulary");
        let t = &c.train;
        assert_eq!(t.max_src_tokens * t.accumulate, 25_000, "{name}: ~25k source tokens an update");
        assert_eq!(t.max_tgt_tokens * t.accumulate, 25_000, "{name}: ~25k target tokens an update");
        assert_eq!((t.warmup, t.lr_scale, t.max_steps), (4000, 1.0, Some(steps)), "{name}");
        assert_eq!((t.checkpoint_minutes, t.keep_last), (10.0, keep), "{name}");
    }
}
