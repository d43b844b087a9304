//! Small context windows: a 2,048-token model (SmolLM2 behind llama-server with `-c 2048`)
//! answers every turn of a long session although `[model] context_window` and
//! `context.reserve_output_tokens` are left at their large-model defaults; a server stating a
//! 1,000-token window does not starve the other sessions of the model.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::fake_model::{Behaviour, FakeModel, Overflow};
use crate::support::{data_dir, json_of, one_turn_per_message, start_server_with, Api};
use turnstile::config::Config;

/// `[model]` for the fake (or real) server at `base_url`, everything else default.
pub fn openai_model(config: &mut Config, base_url: &str, model: &str) {
    one_turn_per_message(config);
    config.model.provider = "openai".into();
    config.model.base_url = base_url.into();
    config.model.model = model.into();
    // No key: the variable is never set.
    config.model.api_key_env = "TURNSTILE_TEST_UNSET_KEY".into();
}

/// A user message of about 200 tiktoken tokens carrying the marker `turn-{turn}`.
pub fn long_message(turn: usize) -> String {
    let words = [
        "the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "near", "river",
        "bank", "while", "birds", "sing", "songs", "about", "spring", "rain",
    ];
    let filler: Vec<&str> = (0..190)
        .map(|i| words[(i * 7 + turn) % words.len()])
        .collect();
    format!("turn-{turn} {}", filler.join(" "))
}

/// One turn through `POST /v1/chat/completions`; returns the status and the reply text (or
/// the error body).
pub async fn chat(api: &Api, session: &str, text: &str) -> (StatusCode, String) {
    let body = json!({"model": "any", "messages": [{"role": "user", "content": text}]});
    let response = api
        .client
        .post(api.url("/v1/chat/completions"))
        .header("X-Session-Key", session)
        .json(&body)
        .send()
        .await
        .expect("POST /v1/chat/completions");
    let (status, value): (StatusCode, Value) = json_of(response).await;
    let text = value["choices"][0]["message"]["content"]
        .as_str()
        .map_or_else(|| value.to_string(), str::to_string);
    (status, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2048_token_model_answers_every_turn_of_a_long_session() {
    let fake = FakeModel::start(Behaviour {
        n_ctx: Some(2_048),
        overflow: Overflow::LlamaServer,
        ..Behaviour::default()
    })
    .await;
    let server = start_server_with(data_dir(), |c| {
        openai_model(c, &fake.base_url, "smollm2-135m");
    })
    .await;
    for turn in 0..60 {
        let (status, reply) = chat(&server.api, "long-session", &long_message(turn)).await;
        assert_eq!(status, StatusCode::OK, "turn {turn}: {reply}");
        assert!(
            reply.starts_with(&format!("answer turn-{turn} ")),
            "turn {turn} was not answered from the user's words: {reply:?}"
        );
    }
    let seen = fake.seen();
    let overflows = seen.iter().filter(|s| s.status == 400).count();
    assert!(
        overflows >= 1,
        "the window was never hit: the test proves nothing"
    );
    assert!(
        overflows <= 6,
        "the budget did not adapt: {overflows} overflows in 60 turns"
    );
    let answered: Vec<_> = seen.iter().filter(|s| s.status == 200).collect();
    assert_eq!(answered.len(), 60);
    for s in &answered {
        let reserve = s.max_tokens.unwrap_or(0);
        assert!(s.prompt_tokens + reserve <= 2_048, "{s:?}");
        assert!(
            (1..=512).contains(&reserve),
            "the answer's reserve must shrink to a quarter of the window: {reserve}"
        );
        assert!(
            s.last_user.starts_with("turn-") && s.last_user.len() > 900,
            "the user's message reached the model whole: {:?}",
            s.last_user
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stated_1000_token_limit_does_not_starve_other_sessions() {
    let fake = FakeModel::start(Behaviour {
        n_ctx: Some(1_000),
        overflow: Overflow::OpenAiText,
        ..Behaviour::default()
    })
    .await;
    let server = start_server_with(data_dir(), |c| {
        openai_model(c, &fake.base_url, "tiny-1k");
    })
    .await;
    // The first turn overflows (4,096 reserved for the answer) and teaches the 1,000 limit.
    let (status, reply) = chat(&server.api, "first", "turn-0 hello there").await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert!(reply.starts_with("answer turn-0"), "{reply:?}");
    assert!(
        fake.seen().iter().any(|s| s.status == 400),
        "the limit was never stated: the test proves nothing"
    );
    // Unrelated sessions of the same model still send their whole message and are answered.
    for n in 1..=5 {
        let text = long_message(n);
        let (status, reply) = chat(&server.api, &format!("other-{n}"), &text).await;
        assert_eq!(status, StatusCode::OK, "{reply}");
        assert!(reply.starts_with(&format!("answer turn-{n} ")), "{reply:?}");
        let seen = fake.seen();
        let last = seen.last().expect("a request");
        assert_eq!(last.status, 200);
        assert_eq!(last.last_user, text, "the message was cut");
        assert!(last.max_tokens.unwrap_or(0) <= 250, "{last:?}");
    }
    server.stop().await;
}
