//! The cancellation signal the executor's tasks select on: one for the lease loop and the lapse
//! watcher, one for the push server (which stops only after the deregistration, P3.7).

use tokio::sync::watch;

/// Resolves once shutdown was asked for. Cheap to clone; every clone sees the same signal.
#[derive(Debug, Clone)]
pub(crate) struct ShutdownSignal(watch::Receiver<bool>);

impl ShutdownSignal {
    /// A signal and its trigger: `send_replace(true)` on the sender fires it.
    pub(crate) fn new() -> (watch::Sender<bool>, Self) {
        let (tx, rx) = watch::channel(false);
        (tx, Self(rx))
    }

    /// Resolves once shutdown was asked for (or its sender is gone).
    pub(crate) async fn wait(&mut self) {
        let _ = self.0.wait_for(|&stop| stop).await;
    }
}
