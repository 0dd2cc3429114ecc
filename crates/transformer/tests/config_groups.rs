//! `ModelConfig` holds the paper's options flat and the parser's inputs (`ParsingInputs`) and
//! imported models' options (`ImportOptions`) as groups, flattened when serialised: a checkpoint's
//! config and a run file's `[model]` section read and write exactly as they did when every field
//! was flat. The expected strings below were written by the flat struct, before the groups.

use transformer::train::run::RunConfig;
use transformer::{Activation, ImportOptions, ModelConfig, ParsingInputs, SinusoidLayout};

/// A config with every parsing input away from its default.
fn parsing() -> ModelConfig {
    ModelConfig {
        parsing: ParsingInputs {
            source_pointer: true,
            next_closer: true,
            next_closer_depth: false,
            next_closer_dropout: 0.25,
            char_dim: 32,
        },
        ..ModelConfig::base()
    }
}

/// A config with every import option away from its default.
fn imported() -> ModelConfig {
    ModelConfig {
        import: ImportOptions {
            activation: Activation::GeluTanh,
            output_bias: true,
            source_vocab_size: Some(1234),
            sinusoid_layout: SinusoidLayout::Halves,
            scale_embedding: false,
        },
        ..ModelConfig::base()
    }
}

const PAPER: &str = r#""n_layers":6,"d_model":512,"d_ff":2048,"n_heads":8,"d_k":64,"d_v":64,"dropout":0.1,"attention_dropout":0.0,"label_smoothing":0.1,"positions":"sinusoidal","max_positions":1024,"vocab_size":37000,"layer_norm_eps":0.000001"#;

/// The flat struct's JSON (a checkpoint's `config` metadata) of base, [`parsing`], [`imported`].
fn flat_json() -> [String; 3] {
    [
        r#""source_pointer":false,"next_closer":false,"next_closer_depth":true,"next_closer_dropout":0.0,"char_dim":0,"activation":"relu","output_bias":false,"source_vocab_size":null,"sinusoid_layout":"interleaved","scale_embedding":true"#,
        r#""source_pointer":true,"next_closer":true,"next_closer_depth":false,"next_closer_dropout":0.25,"char_dim":32,"activation":"relu","output_bias":false,"source_vocab_size":null,"sinusoid_layout":"interleaved","scale_embedding":true"#,
        r#""source_pointer":false,"next_closer":false,"next_closer_depth":true,"next_closer_dropout":0.0,"char_dim":0,"activation":"gelu_tanh","output_bias":true,"source_vocab_size":1234,"sinusoid_layout":"halves","scale_embedding":false"#,
    ]
    .map(|rest| format!("{{{PAPER},{rest}}}"))
}

#[test]
fn json_is_byte_identical_to_the_flat_structs_and_reads_back() {
    for (c, want) in [ModelConfig::base(), parsing(), imported()].iter().zip(flat_json()) {
        assert_eq!(serde_json::to_string(c).unwrap(), want);
        assert_eq!(&serde_json::from_str::<ModelConfig>(&want).unwrap(), c);
    }
}

#[test]
fn toml_is_byte_identical_to_the_flat_structs() {
    let paper = "n_layers = 6\nd_model = 512\nd_ff = 2048\nn_heads = 8\nd_k = 64\nd_v = 64\n\
                 dropout = 0.10000000149011612\nattention_dropout = 0.0\nlabel_smoothing = 0.10000000149011612\n\
                 positions = \"sinusoidal\"\nmax_positions = 1024\nvocab_size = 37000\n\
                 layer_norm_eps = 0.0000009999999974752427\n";
    let parsing_toml = "source_pointer = true\nnext_closer = true\nnext_closer_depth = false\n\
                        next_closer_dropout = 0.25\nchar_dim = 32\nactivation = \"relu\"\noutput_bias = false\n\
                        sinusoid_layout = \"interleaved\"\nscale_embedding = true\n";
    // TOML has no null: a `None` source vocabulary is left out, as before.
    let imported_toml = "source_pointer = false\nnext_closer = false\nnext_closer_depth = true\n\
                         next_closer_dropout = 0.0\nchar_dim = 0\nactivation = \"gelu_tanh\"\noutput_bias = true\n\
                         source_vocab_size = 1234\nsinusoid_layout = \"halves\"\nscale_embedding = false\n";
    assert_eq!(toml::to_string(&parsing()).unwrap(), format!("{paper}{parsing_toml}"));
    assert_eq!(toml::to_string(&imported()).unwrap(), format!("{paper}{imported_toml}"));
}

#[test]
fn a_config_without_the_groups_reads_with_their_defaults() {
    // The golden fixtures' configs were written before any option of either group existed.
    let path = transformer::test_support::repo("crates/transformer/tests/fixtures/golden_tiny.safetensors");
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let config = header["__metadata__"]["config"].as_str().unwrap();
    assert!(!config.contains("source_pointer") && !config.contains("activation"), "{config}");
    let c: ModelConfig = serde_json::from_str(config).unwrap();
    assert_eq!((c.n_layers, c.d_model, c.d_v), (2, 24, 6));
    assert_eq!((c.parsing, c.import), (ParsingInputs::default(), ImportOptions::default()));
    // The groups' defaults are the serde defaults (`next_closer_depth` and `scale_embedding` true)
    // and every preset's.
    let d = ParsingInputs::default();
    assert!(d.next_closer_depth && !d.source_pointer && !d.next_closer && d.char_dim == 0);
    assert!(ImportOptions::default().scale_embedding);
    for p in transformer::config::Preset::ALL {
        assert_eq!((p.config().parsing, p.config().import), (ParsingInputs::default(), ImportOptions::default()));
    }
}

const MINIMAL: &str =
    "[data]\ntrain_src = \"a\"\ntrain_tgt = \"b\"\nvalid_src = \"e\"\nvalid_tgt = \"f\"\nbpe = \"c\"\n\
                       [train]\noutput_dir = \"d\"\n";

fn run(model: &str, overrides: &[&str]) -> Result<RunConfig, String> {
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    RunConfig::from_toml(&format!("{model}{MINIMAL}"), "test.toml", &o).map_err(|e| e.to_string())
}

#[test]
fn a_flat_model_section_sets_the_groups_fields() {
    let section = "[model]\nsource_pointer = true\nnext_closer = true\nnext_closer_depth = false\n\
                   next_closer_dropout = 0.1\nchar_dim = 16\nactivation = \"swish\"\nd_ff = 64\n";
    let c = run(section, &["model.scale_embedding=false"]).unwrap().model_config(500).unwrap();
    let want = ModelConfig {
        d_ff: 64,
        vocab_size: 500,
        parsing: ParsingInputs {
            source_pointer: true,
            next_closer: true,
            next_closer_depth: false,
            next_closer_dropout: 0.1,
            char_dim: 16,
        },
        import: ImportOptions { activation: Activation::Swish, scale_embedding: false, ..ImportOptions::default() },
        ..ModelConfig::base()
    };
    assert_eq!(c, want);
}

#[test]
fn unknown_fixed_and_mistyped_fields_are_refused_as_before() {
    let list = "`preset`, `n_layers`, `d_model`, `d_ff`, `n_heads`, `d_k`, `d_v`, `dropout`, `attention_dropout`, \
                `label_smoothing`, `positions`, `max_positions`, `source_pointer`, `next_closer`, `next_closer_depth`, \
                `next_closer_dropout`, `char_dim`, `activation`, `output_bias`, `sinusoid_layout`, `scale_embedding`";
    for key in ["foo", "source_vocab_size", "parsing", "import"] {
        assert_eq!(
            run("", &[&format!("model.{key}=5")]).unwrap_err(),
            format!("invalid configuration: test.toml: unknown field `{key}`, expected one of {list}\nin `model`\n")
        );
    }
    // A wrong type in a group's field is named as one in the paper's is.
    for (set, want) in [
        ("model.char_dim=\"x\"", "invalid type: string \"x\", expected usize\nin `model.char_dim`"),
        (
            "model.next_closer_dropout=true",
            "invalid type: boolean `true`, expected f32\nin `model.next_closer_dropout`",
        ),
        ("model.next_closer_depth=3", "invalid type: integer `3`, expected a boolean\nin `model.next_closer_depth`"),
        ("model.scale_embedding=2", "invalid type: integer `2`, expected a boolean\nin `model.scale_embedding`"),
        (
            "model.activation=abc",
            "unknown variant `abc`, expected one of `relu`, `swish`, `gelu`, `gelu_tanh`, `gelu_sigmoid`\n\
             in `model.activation`",
        ),
    ] {
        assert_eq!(run("", &[set]).unwrap_err(), format!("invalid configuration: test.toml: {want}\n"), "{set}");
    }
}
