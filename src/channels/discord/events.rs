//! The gateway dispatches the shard task reads, as their raw JSON: the envelope and the few
//! fields of the non-message events it uses (twilight's full models of guilds and channels
//! are larger than what is needed and stricter than a catch-all reader should be). Messages
//! themselves are read with twilight's [`Message`](twilight_model::channel::message::Message).

use serde::Deserialize;
use serde_json::Value;

/// A gateway payload: `op`, and for dispatches (op 0) the event name `t` and data `d`.
#[derive(Debug, Deserialize)]
pub(crate) struct Envelope {
    /// The opcode.
    pub op: u8,
    /// The dispatch event name.
    #[serde(default)]
    pub t: Option<String>,
    /// The data.
    #[serde(default)]
    pub d: Option<Value>,
}

/// A snowflake as Discord sends it (a string), read as a number.
fn snowflake<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

fn opt_snowflake<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let s = Option::<std::borrow::Cow<'de, str>>::deserialize(d)?;
    s.map(|s| s.parse().map_err(serde::de::Error::custom))
        .transpose()
}

fn snowflakes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
    let v = Vec::<std::borrow::Cow<'de, str>>::deserialize(d)?;
    v.iter()
        .map(|s| s.parse().map_err(serde::de::Error::custom))
        .collect()
}

/// `READY`.
#[derive(Debug, Deserialize)]
pub(crate) struct Ready {
    /// The bot (session id and resume URL are twilight's to keep).
    pub user: UserRef,
}

/// A user, by id.
#[derive(Debug, Deserialize)]
pub(crate) struct UserRef {
    /// Its id.
    #[serde(deserialize_with = "snowflake")]
    pub id: u64,
}

/// A channel or thread, by id, with its parent.
#[derive(Debug, Deserialize)]
pub(crate) struct ChannelRef {
    /// Its id.
    #[serde(deserialize_with = "snowflake")]
    pub id: u64,
    /// Its type (10–12 are threads).
    #[serde(rename = "type", default)]
    pub kind: u8,
    /// The parent channel (a thread's channel).
    #[serde(default, deserialize_with = "opt_snowflake")]
    pub parent_id: Option<u64>,
}

impl ChannelRef {
    /// The parent when this is a thread.
    pub(crate) fn thread_parent(&self) -> Option<u64> {
        matches!(self.kind, 10..=12)
            .then_some(self.parent_id)
            .flatten()
    }
}

/// A guild member: its user and roles.
#[derive(Debug, Deserialize)]
pub(crate) struct MemberRef {
    /// The user.
    pub user: Option<UserRef>,
    /// Its role ids.
    #[serde(default, deserialize_with = "snowflakes")]
    pub roles: Vec<u64>,
}

/// `GUILD_CREATE` (the parts used: channels, active threads, the bot's member).
#[derive(Debug, Deserialize)]
pub(crate) struct GuildCreate {
    /// The guild.
    #[serde(deserialize_with = "snowflake")]
    pub id: u64,
    /// Its channels.
    #[serde(default)]
    pub channels: Vec<ChannelRef>,
    /// Its active threads.
    #[serde(default)]
    pub threads: Vec<ChannelRef>,
    /// Members sent with it (the bot's own among them).
    #[serde(default)]
    pub members: Vec<MemberRef>,
}

/// `THREAD_LIST_SYNC`.
#[derive(Debug, Deserialize)]
pub(crate) struct ThreadListSync {
    /// The threads.
    #[serde(default)]
    pub threads: Vec<ChannelRef>,
}

/// `GUILD_MEMBER_UPDATE`.
#[derive(Debug, Deserialize)]
pub(crate) struct MemberUpdate {
    /// The guild.
    #[serde(deserialize_with = "snowflake")]
    pub guild_id: u64,
    /// The member's user.
    pub user: UserRef,
    /// Its roles now.
    #[serde(default, deserialize_with = "snowflakes")]
    pub roles: Vec<u64>,
}

/// A fatal gateway close code's reason: the channel stops instead of reconnecting.
pub(crate) fn fatal_close(code: u16) -> Option<&'static str> {
    Some(match code {
        4004 => "authentication failed (4004): the bot token is wrong or was reset",
        4010 => "invalid shard (4010)",
        4011 => "sharding required (4011): the bot is in too many guilds for one shard",
        4012 => "invalid API version (4012)",
        4013 => "invalid intents (4013)",
        4014 => {
            "disallowed intents (4014): enable the Message Content (and Server Members) intent \
             for the bot in the Developer Portal"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_and_events_read_with_unknown_fields() {
        let e: Envelope = serde_json::from_str(
            r#"{"op":0,"s":3,"t":"GUILD_CREATE","d":{"id":"10","name":"x","channels":[{"id":"20","type":0}],
                "threads":[{"id":"30","type":11,"parent_id":"20"}],
                "members":[{"user":{"id":"999"},"roles":["77"]}]}}"#,
        )
        .unwrap();
        assert_eq!((e.op, e.t.as_deref()), (0, Some("GUILD_CREATE")));
        let g: GuildCreate = serde_json::from_value(e.d.unwrap()).unwrap();
        assert_eq!(g.id, 10);
        assert_eq!(g.channels[0].thread_parent(), None);
        assert_eq!(g.threads[0].thread_parent(), Some(20));
        assert_eq!(g.members[0].roles, vec![77]);
        let hello: Envelope =
            serde_json::from_str(r#"{"op":10,"d":{"heartbeat_interval":1}}"#).unwrap();
        assert_eq!((hello.op, hello.t), (10, None));
        assert!(serde_json::from_str::<UserRef>(r#"{"id":"x"}"#).is_err());
    }

    #[test]
    fn fatal_close_codes() {
        assert!(fatal_close(4004).unwrap().contains("4004"));
        assert!(fatal_close(4014).unwrap().contains("Message Content"));
        for resumable in [1000, 1001, 4000, 4001, 4007, 4008, 4009] {
            assert!(fatal_close(resumable).is_none(), "{resumable}");
        }
    }
}
