//! One module per subcommand; each sees only its validated config.

pub mod dump;
pub mod print;
pub mod summary;
