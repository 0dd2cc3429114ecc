//! The options of `transformer serve` (clap only; built with or without the `serve` feature).

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use std::path::PathBuf;
use transformer::Precision;

/// `transformer serve`: where to listen, which model, and the limits that keep the server bounded.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// The checkpoint of a translation model (from `train` or `average`). Repeat it for an
    /// ensemble (the models must share the vocabulary): their log-probabilities are averaged at
    /// every step.
    #[arg(long, required = true)]
    pub checkpoint: Vec<PathBuf>,
    /// The tokenizer the checkpoint was trained with: our BPE model, or the tokenizer file of an
    /// imported model (`transformer import marian`; alias --bpe).
    #[arg(long = "tokenizer", visible_alias = "bpe")]
    pub tokenizer: PathBuf,
    /// Address to listen on (loopback by default; 0.0.0.0 listens on every interface).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port; the bound address is printed on stderr).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Arithmetic of the matrix products: f32, bf16 operands with f32 sums (AMX or AVX512-BF16),
    /// or int8 weights (quantised per row at load) and activations, exact integer sums.
    #[arg(long, default_value = "f32", value_parser = PossibleValuesParser::new(Precision::ALL.map(Precision::name))
        .map(|s| *Precision::ALL.iter().find(|p| p.name() == s).expect("clap checked the name")))]
    pub precision: Precision,
    /// Source tokens per decoded batch, padding included: the batcher's token budget.
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens: u32,
    /// Sentences per decoded batch.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_sentences: u32,
    /// Largest request body in bytes (larger: 413).
    #[arg(long, default_value_t = 1 << 20, value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pub max_body_bytes: u64,
    /// Most sentences in one request (more: 400).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_request_sentences: u32,
    /// Longest sentence in BPE tokens (longer: 400) [default: the model's max_positions].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_sentence_tokens: Option<u32>,
    /// Most sentences waiting to be decoded; a request that would pass it gets 503 with Retry-After.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_queue: u32,
    /// Largest beam a request may ask for (more: 400).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub max_beam: u32,
    /// Most attention weights one request may ask for with "attention": true, counted with the
    /// longest outputs the search allows (more: 400).
    #[arg(long, default_value_t = 2_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_attention_weights: u64,
    /// On SIGTERM or Ctrl-C, seconds to wait for open connections to finish before closing them
    /// (a client that stopped sending mid-request would otherwise hold the server forever).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub drain_seconds: u64,
    /// Seconds a connection may take to send a request's headers, counted from when it connects
    /// or from its last answer (so it is also how long an idle keep-alive connection stays open).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub header_timeout_seconds: u64,
    /// Seconds a request body may take to arrive in full; a slower one is abandoned (408, the
    /// connection closed, counted apart in /metrics).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub body_timeout_seconds: u64,
    /// Most connections open at once (lowered to fit the open-file limit); a connection past it
    /// is served one request within a second and closed: /health as usual, 503 to anything else.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections: u32,
    /// Threads of the HTTP runtime (decoding runs on the --threads pool, not on these).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub http_threads: u32,
    /// A vocabulary shortlist (from `transformer shortlist`; Marian's --shortlist, CTranslate2's
    /// use_vmap): requests decode over the targets it lists for their sources unless they send
    /// "use_shortlist": false.
    #[arg(long)]
    pub shortlist: Option<PathBuf>,
}
