//! Tests of the context engine: each processor alone, sources, whole assemblies against golden
//! snapshots, and properties over random sessions.

mod fixtures;
mod golden;
mod processors;
mod properties;
mod recall;
mod skills_and_attachments;
mod sources;
mod time_and_place;
