//! One module per subcommand; each sees only its validated config.

pub mod demo;
pub mod diff;
pub mod dump;
pub mod print;
pub mod push;
pub mod record;
pub mod repair;
pub mod summary;
pub mod top;
pub mod view;
