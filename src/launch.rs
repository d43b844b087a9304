//! Starting a runtime, above both the runtime and the channels (which know nothing of each
//! other's start-up): open the runtime, start the channels the configuration turns on, then
//! replay what was acknowledged but not answered.

use crate::error::Error;
use crate::runtime::{Runtime, RuntimeBuilder};

impl RuntimeBuilder {
    /// Opens the store, starts the actors and the configured channels (not with
    /// [`RuntimeBuilder::inspect_only`]), and replays what was acknowledged but not answered.
    pub async fn build(self) -> Result<Runtime, Error> {
        let serving = !self.is_inspect_only();
        let runtime = self.open().await?;
        if !serving {
            return Ok(runtime);
        }
        // Channels first, so replies to replayed messages find their channel.
        if let Err(e) = crate::channels::start_configured(&runtime).await {
            let _ = runtime.shutdown().await;
            return Err(e);
        }
        runtime.replay()?;
        Ok(runtime)
    }
}
