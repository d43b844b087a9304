//! The names MCP tools reach the model under: `<server>__<tool>`.
//!
//! A model's tool names are 1–64 characters of `[A-Za-z0-9_-]` (OpenAI's rule, the one
//! `ToolRegistry` enforces), while an MCP tool name may be longer or hold other characters
//! (`.`, `/`). Other characters become `_`; a name still too long keeps its head and ends in a
//! hash of the whole original, so two long names stay apart. Server names have no `__` and
//! do not end in `_` (checked with the config), so the first `__` of a namespaced name always
//! ends its server's part: two servers' tools can never share a name.

use crate::tools::MAX_TOOL_NAME_CHARS;

/// Between the server's name and the tool's.
pub(crate) const SEPARATOR: &str = "__";

/// Hex digits of the hash that ends a shortened name.
const HASH_DIGITS: usize = 8;

/// The name the model sees for `server`'s tool `tool`.
pub(crate) fn namespaced(server: &str, tool: &str) -> String {
    let clean: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let full = format!("{server}{SEPARATOR}{clean}");
    if full.len() <= MAX_TOOL_NAME_CHARS && clean == tool {
        return full;
    }
    // Changed or too long: a hash of the original keeps distinct names distinct.
    let hash = format!("{:08x}", crc32fast::hash(tool.as_bytes()));
    let room = MAX_TOOL_NAME_CHARS - 1 - HASH_DIGITS;
    let head: String = full.chars().take(room).collect();
    format!("{head}_{hash}")
}

/// The server part of a namespaced name, if it has one.
pub(crate) fn server_of(name: &str) -> Option<&str> {
    name.split_once(SEPARATOR).map(|(server, _)| server)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(name: &str) -> bool {
        !name.is_empty()
            && name.len() <= MAX_TOOL_NAME_CHARS
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    #[test]
    fn plain_names_are_prefixed() {
        assert_eq!(namespaced("files", "read_file"), "files__read_file");
        assert_eq!(server_of("files__read_file"), Some("files"));
        // A tool name starting with `_` still splits at the server's end.
        assert_eq!(namespaced("a", "_x"), "a___x");
        assert_eq!(server_of("a___x"), Some("a"));
        assert_eq!(server_of("plain"), None);
    }

    #[test]
    fn odd_and_long_names_become_valid_and_stay_distinct() {
        let cases = [
            ("srv", "fs.read/file"),
            ("srv", "fs_read_file"),
            ("srv", &"x".repeat(100)),
            ("srv", &format!("{}y", "x".repeat(99))),
            ("srv", "ünïcode"),
        ];
        let names: Vec<String> = cases.iter().map(|(s, t)| namespaced(s, t)).collect();
        for (name, (server, _)) in names.iter().zip(cases) {
            assert!(valid(name), "{name}");
            assert_eq!(server_of(name), Some(server), "{name}");
        }
        let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
    }

    #[test]
    fn two_servers_never_collide() {
        // Valid server names (no `__`, no trailing `_`; checked with the config) split back.
        for (server, tool) in [("a", "b__c"), ("a-b", "c"), ("ab", "_c"), ("a", "bc")] {
            assert_eq!(server_of(&namespaced(server, tool)), Some(server));
        }
        assert_ne!(namespaced("ab", "c"), namespaced("a", "bc"));
    }
}
