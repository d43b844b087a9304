//! An agent's `tools_allow` and `tools_deny`: which tools (registered or MCP) it is offered.

/// Tool-name patterns: a name, or a pattern with `*` standing for any run of characters
/// (`github__*`, `*_search`, `*`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFilter {
    /// `None`: every tool is allowed.
    allow: Option<Vec<String>>,
    deny: Vec<String>,
}

impl ToolFilter {
    /// The filter of `allow` (`None`: all) and `deny`.
    pub fn new(allow: Option<&[String]>, deny: &[String]) -> Self {
        Self {
            allow: allow.map(<[String]>::to_vec),
            deny: deny.to_vec(),
        }
    }

    /// Whether it lets every tool through.
    pub fn is_open(&self) -> bool {
        self.allow.is_none() && self.deny.is_empty()
    }

    /// Whether the agent is offered tool `name`: allowed (or no allow list) and not denied.
    pub fn allows(&self, name: &str) -> bool {
        let allowed = self
            .allow
            .as_ref()
            .is_none_or(|allow| allow.iter().any(|p| glob(p, name)));
        allowed && !self.deny.iter().any(|p| glob(p, name))
    }
}

/// Whether `name` matches `pattern` (`*`: any run of characters, possibly empty).
fn glob(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let Some(first) = parts.next() else {
        return pattern == name;
    };
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*`: the whole name must be the pattern.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("search", "search"));
        assert!(!glob("search", "search2"));
        assert!(glob("*", ""));
        assert!(glob("*", "anything"));
        assert!(glob("github__*", "github__create_issue"));
        assert!(!glob("github__*", "gitlab__x"));
        assert!(glob("*_search", "web_search"));
        assert!(!glob("*_search", "web_search_x"));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(glob("a*b*c", "abc"));
        assert!(!glob("a*b*c", "acb"));
        assert!(
            !glob("ab*ba", "aba"),
            "the prefix and suffix may not overlap"
        );
    }

    #[test]
    fn allow_then_deny() {
        let open = ToolFilter::default();
        assert!(open.is_open() && open.allows("x"));
        let f = ToolFilter::new(
            Some(&["github__*".to_string(), "clock".to_string()]),
            &["github__delete_*".to_string()],
        );
        assert!(f.allows("clock"));
        assert!(f.allows("github__create_issue"));
        assert!(!f.allows("github__delete_repo"));
        assert!(!f.allows("shell"));
        let none = ToolFilter::new(Some(&[]), &[]);
        assert!(!none.allows("clock"), "an empty allow list allows nothing");
        let deny_only = ToolFilter::new(None, &["shell".to_string()]);
        assert!(deny_only.allows("clock") && !deny_only.allows("shell"));
    }
}
