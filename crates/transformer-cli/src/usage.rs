//! Usage errors: mistakes in a command line found after clap parsed it, which exit with code 2.

/// A mistake in the command line found after parsing (two options that do not go together, an
/// index past the model's layers…): exit code 2, like clap's own usage errors.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// Returns a [`Usage`] error from the enclosing function.
#[macro_export]
macro_rules! usage {
    ($($t:tt)*) => { return Err(anyhow::Error::new($crate::usage::Usage(format!($($t)*)))) };
}
