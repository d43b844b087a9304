//! `skills`: the compact list of the workspace's skills — `skills/**/SKILL.md`, each with a
//! front-matter `name` and `description` — one line per skill with its path (home dir shown as
//! `~/`). The skill bodies stay on disk: the model reads one when a task calls for it. The
//! `only` parameter lists a chosen few by name (an agent that should not see every skill of a
//! shared workspace).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Mutex;

use serde::Deserialize;

use super::workspace::{fingerprint, home_dir, read_capped, shorten_home, stamp, FileStamp};
use crate::context::text::prefix_chars;
use crate::context::{
    BlockKind, BlockMeta, ContextBlock, ContextError, ContextSource, SessionView, StageContext,
    StageError, TokenBudget,
};
use crate::model::MESSAGE_OVERHEAD_TOKENS;

/// Bytes read from the top of a SKILL.md to find its front matter.
const FRONT_MATTER_BYTES: u64 = 8 * 1024;

/// Most names `only` may list (a config list, bounded like every other).
const MAX_ONLY_NAMES: usize = 1_000;

/// The line that opens the skills list.
pub const SKILLS_HEADER: &str =
    "## Skills\n\nAvailable skills (read a skill's SKILL.md before using it):";

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    /// Most skills listed. Default 200.
    max_skills: usize,
    /// How deep under `skills/` to look. Default 6.
    max_depth: usize,
    /// Longest description shown, in characters. Default 300.
    max_description_chars: usize,
    /// The directory shown as `~`. Default `$HOME`.
    home_dir: Option<PathBuf>,
    /// When set, only the skills with these front-matter names are listed (exact match; at
    /// most 1,000; the scan still reads at most `max_skills` files). Default unset: all.
    only: Option<Vec<String>>,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            max_skills: 200,
            max_depth: 6,
            max_description_chars: 300,
            home_dir: None,
            only: None,
        }
    }
}

/// One skill's front matter.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Skill {
    name: String,
    description: String,
}

/// The rendered list, kept while its inputs do not change.
struct Rendered {
    fingerprint: u64,
    content: String,
    tokens: u32,
}

pub(super) struct SkillsSource {
    root: Option<PathBuf>,
    home: Option<PathBuf>,
    max_skills: usize,
    max_depth: usize,
    max_description_chars: usize,
    /// The names `only` lists; `None`: every skill.
    only: Option<HashSet<String>>,
    /// Parsed front matter by path; rebuilt from each scan, so it holds at most `max_skills`.
    parsed: Mutex<HashMap<PathBuf, (FileStamp, Option<Skill>)>>,
    rendered: Mutex<Option<Rendered>>,
}

impl SkillsSource {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        let p: Params = c.params()?;
        let only = match p.only {
            None => None,
            Some(names) if names.is_empty() => {
                return Err(StageError(format!(
                    "context stage {:?}: `only` lists no skill (remove the source to list none)",
                    c.name
                )))
            }
            Some(names) if names.len() > MAX_ONLY_NAMES => {
                return Err(StageError(format!(
                    "context stage {:?}: `only` lists more than {MAX_ONLY_NAMES} skills",
                    c.name
                )))
            }
            Some(names) => Some(names.iter().map(|n| n.trim().to_string()).collect()),
        };
        Ok(Self {
            root: c
                .config
                .agent
                .workspace_dir
                .as_ref()
                .map(|d| d.join("skills")),
            home: p.home_dir.or_else(home_dir),
            max_skills: p.max_skills,
            max_depth: p.max_depth,
            max_description_chars: p.max_description_chars,
            only,
            parsed: Mutex::new(HashMap::new()),
            rendered: Mutex::new(None),
        })
    }

    /// `SKILL.md` files under the root, in path order, at most `max_skills`.
    fn scan(&self) -> Vec<(PathBuf, Option<FileStamp>)> {
        let Some(root) = &self.root else {
            return Vec::new();
        };
        walkdir::WalkDir::new(root)
            .max_depth(self.max_depth)
            .sort_by_file_name()
            .into_iter()
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_file() && e.file_name() == "SKILL.md")
            .take(self.max_skills)
            .map(|e| {
                let stamp = stamp(e.path());
                (e.into_path(), stamp)
            })
            .collect()
    }

    fn render(&self, files: &[(PathBuf, Option<FileStamp>)]) -> String {
        let mut parsed = self.parsed.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = HashMap::with_capacity(files.len());
        let mut lines = Vec::new();
        for (path, stamp) in files {
            let Some(stamp) = *stamp else { continue };
            let skill = match parsed.remove(path) {
                Some((s, skill)) if s == stamp => skill,
                _ => read_capped(path, FRONT_MATTER_BYTES)
                    .ok()
                    .and_then(|t| front_matter(&t)),
            };
            let listed = |s: &Skill| self.only.as_ref().is_none_or(|o| o.contains(&s.name));
            if let Some(s) = skill.as_ref().filter(|s| listed(s)) {
                lines.push(format!(
                    "- {}: {} ({})",
                    s.name,
                    prefix_chars(&s.description, self.max_description_chars),
                    shorten_home(path, self.home.as_deref())
                ));
            } else if skill.is_none() {
                tracing::debug!(path = %path.display(), "SKILL.md without name/description front matter");
            }
            next.insert(path.clone(), (stamp, skill));
        }
        *parsed = next;
        if lines.is_empty() {
            return String::new();
        }
        format!("{SKILLS_HEADER}\n{}", lines.join("\n"))
    }
}

/// `name` and `description` from a `---`-delimited front matter of `key: value` lines (single
/// line values, optionally quoted).
fn front_matter(text: &str) -> Option<Skill> {
    let mut lines = text.trim_start_matches('\u{feff}').lines();
    if lines.next()?.trim() != "---" {
        return None;
    }
    let (mut name, mut description) = (None, None);
    for line in lines {
        if line.trim() == "---" {
            break;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = unquote(value.trim());
        match key.trim() {
            "name" => name = Some(value.to_string()),
            "description" => description = Some(value.to_string()),
            _ => {}
        }
    }
    let name = name.filter(|n| !n.is_empty())?;
    Some(Skill {
        name,
        description: description.unwrap_or_default(),
    })
}

fn unquote(v: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return inner;
        }
    }
    v
}

impl ContextSource for SkillsSource {
    fn name(&self) -> &str {
        "skills"
    }

    fn default_priority(&self) -> u8 {
        85
    }

    fn fingerprint(&self, _session: &SessionView<'_>) -> u64 {
        let files = self.scan();
        fingerprint(files.iter().map(|(p, s)| (p.as_path(), *s)))
    }

    fn collect(
        &self,
        session: &SessionView<'_>,
        _budget: &TokenBudget,
    ) -> Result<Vec<ContextBlock>, ContextError> {
        let files = self.scan();
        let fp = fingerprint(files.iter().map(|(p, s)| (p.as_path(), *s)));
        let mut rendered = self.rendered.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = rendered.as_ref().is_some_and(|r| r.fingerprint == fp);
        if !fresh {
            let content = self.render(&files);
            let tokens = session.tokens.count(&content);
            *rendered = Some(Rendered {
                fingerprint: fp,
                content,
                tokens,
            });
        }
        let Some(r) = rendered.as_ref().filter(|r| !r.content.is_empty()) else {
            return Ok(Vec::new());
        };
        let meta = BlockMeta {
            path: Some("skills/".into()),
            ..BlockMeta::default()
        };
        Ok(vec![ContextBlock::new(
            BlockKind::Skills,
            r.content.clone(),
            r.tokens + MESSAGE_OVERHEAD_TOKENS,
        )
        .with_meta(meta)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn front_matter_vectors() {
        let s = front_matter("---\nname: github\ndescription: \"Work with GitHub\"\n---\nbody")
            .unwrap();
        assert_eq!(s.name, "github");
        assert_eq!(s.description, "Work with GitHub");
        assert_eq!(
            front_matter("---\nname: 'x'\n---").unwrap(),
            Skill {
                name: "x".into(),
                description: String::new()
            }
        );
        assert!(front_matter("no front matter").is_none());
        assert!(front_matter("---\ndescription: nameless\n---").is_none());
        assert!(front_matter("").is_none());
    }

    #[test]
    fn home_is_shortened() {
        let home = Path::new("/home/alice");
        assert_eq!(
            shorten_home(Path::new("/home/alice/ws/skills/a/SKILL.md"), Some(home)),
            "~/ws/skills/a/SKILL.md"
        );
        assert_eq!(
            shorten_home(Path::new("/srv/ws/SKILL.md"), Some(home)),
            "/srv/ws/SKILL.md"
        );
    }
}
