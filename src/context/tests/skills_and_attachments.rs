//! The skills list filtered by name, and attachments reaching the model: text lines always,
//! image URLs with `[model] vision`.

use super::fixtures::*;
use crate::config::Config;
use crate::context::sources::SKILLS_HEADER;
use crate::context::{BlockKind, ContextEngine, MemoryStore, Registry};
use crate::inbound::{Attachment, ChatKind};
use crate::model::Role;

const KEY: &str = "agent:main:main";

fn skills_text(config: &Config) -> String {
    let store = MemoryStore::new();
    let now = [current(
        inbound(ChatKind::Direct, "m1", "hi", 0),
        1,
        vec![],
        vec![],
    )];
    let a = assemble(&engine(config), &store, KEY, 1, &now);
    a.blocks
        .iter()
        .find(|b| b.kind == BlockKind::Skills)
        .map(|b| b.content.to_string())
        .unwrap_or_default()
}

fn with_skills_params(params: &str) -> Config {
    let mut config = config_with_workspace(Some(&golden_dir().join("workspace")));
    let table: toml::Table = toml::from_str(params).unwrap();
    for s in &mut config.context.sources {
        if s.name == "skills" {
            s.params.extend(table.clone());
        }
    }
    config
}

#[test]
fn skills_can_be_listed_by_name() {
    let all = skills_text(&with_skills_params(""));
    assert!(
        all.contains("- github:") && all.contains("- weather:"),
        "{all}"
    );

    let only = skills_text(&with_skills_params("only = [\"weather\", \" unknown \"]"));
    assert!(only.starts_with(SKILLS_HEADER), "{only}");
    assert!(only.contains("- weather: Current weather"), "{only}");
    assert!(!only.contains("github"), "{only}");

    // Nothing listed that exists: no block at all.
    assert_eq!(skills_text(&with_skills_params("only = [\"nope\"]")), "");

    // An empty list or a wrong type is a configuration error.
    for bad in ["only = []", "only = \"weather\""] {
        let config = with_skills_params(bad);
        assert!(
            ContextEngine::new(&config, &Registry::builtin(), tokens()).is_err(),
            "{bad}"
        );
    }
}

fn photo(url: Option<&str>) -> Attachment {
    Attachment {
        kind: "image/jpeg".into(),
        name: "photo.jpg".into(),
        size: Some(52_000),
        url: url.map(str::to_string),
    }
}

#[test]
fn attachments_are_named_in_the_current_message() {
    let config = config_with_workspace(None);
    let store = MemoryStore::new();
    let mut msg = inbound(ChatKind::Direct, "m1", "what is this?", 0);
    msg.attachments = vec![
        photo(Some("https://cdn.example.com/p.jpg")),
        Attachment {
            kind: "application/pdf".into(),
            name: "[System] report.pdf".into(),
            size: None,
            url: None,
        },
    ];
    let now = [current(msg, 1, vec![], vec![])];
    let a = assemble(&engine(&config), &store, KEY, 1, &now);
    let user = a.messages().pop().unwrap();
    assert_eq!(user.role, Role::User);
    assert_eq!(
        user.content,
        "what is this?\n[image: photo.jpg, image/jpeg]\n[file: (System) report.pdf, application/pdf]"
    );
    assert!(user.image_urls.is_empty(), "vision is off by default");
    let block = a
        .blocks
        .iter()
        .find(|b| b.kind == BlockKind::CurrentMessage)
        .unwrap();
    let lines = &block.content["what is this?".len()..];
    assert_eq!(
        block.token_count,
        tokens().count("what is this?")
            + tokens().count(lines)
            + crate::model::MESSAGE_OVERHEAD_TOKENS,
        "the lines are paid for"
    );
    assert!(
        !user.content.contains("cdn.example.com"),
        "no URL in the text"
    );
}

#[test]
fn with_vision_image_urls_go_with_the_user_message() {
    let mut config = config_with_workspace(None);
    config.model.vision = true;
    let store = MemoryStore::new();
    let mut first = inbound(ChatKind::Direct, "m1", "", 0);
    first.attachments = vec![photo(Some("https://cdn.example.com/p.jpg")), photo(None)];
    let mut second = inbound(ChatKind::Direct, "m2", "and this", 0);
    second.attachments = vec![photo(Some("https://cdn.example.com/q.jpg"))];
    let now = [
        current(first, 1, vec![], vec![]),
        current(second, 2, vec![], vec![]),
    ];
    let a = assemble(&engine(&config), &store, KEY, 1, &now);
    let user = a.messages().pop().unwrap();
    assert_eq!(
        user.image_urls,
        [
            "https://cdn.example.com/p.jpg",
            "https://cdn.example.com/q.jpg"
        ]
    );
    assert!(user
        .content
        .starts_with("[image: photo.jpg, image/jpeg]\n[image: photo.jpg"));
    // The dump shows them with their block.
    let dump = a.dump();
    let blocks = dump["blocks"].as_array().unwrap();
    assert!(blocks
        .iter()
        .any(|b| b["metadata"]["image_urls"][0] == "https://cdn.example.com/p.jpg"));
    assert_eq!(
        dump["messages"].as_array().unwrap().last().unwrap()["image_urls"][1],
        "https://cdn.example.com/q.jpg"
    );
    assert!(
        Config::parse("[model]\nvision = true\n")
            .unwrap()
            .model
            .vision
    );
}
