//! Logging: `RUST_LOG`-style filtering (default `info`), text or JSON lines on stderr.

use std::io::IsTerminal;

use clap::ValueEnum;

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (with the current span's fields, e.g. a turn's timing).
    Json,
}

/// Installs the global subscriber. Text lines are coloured only on a terminal: a log written
/// to a file or a pipe (`serve > log 2>&1`) gets plain lines, and `NO_COLOR` (any non-empty
/// value, <https://no-color.org>) turns colour off everywhere.
pub(crate) fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(use_colour(std::io::stderr().is_terminal(), no_color))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .init(),
    }
}

/// Whether text log lines carry ANSI colour codes.
fn use_colour(stderr_is_terminal: bool, no_color: bool) -> bool {
    stderr_is_terminal && !no_color
}

#[cfg(test)]
mod tests {
    use super::use_colour;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(use_colour(true, false));
        assert!(
            !use_colour(false, false),
            "a file or a pipe gets plain lines"
        );
        assert!(!use_colour(true, true), "NO_COLOR wins on a terminal");
    }
}
