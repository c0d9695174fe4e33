//! `leaseholdctl executor remove`: an operator's deregistration (PROTOCOL P5.5). The managers
//! drain an executor that still holds shards and answer with it as it is; asked again once its
//! shards have moved by handoff, they deregister it. `--wait` asks until then.

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::exit::CtlError;
use super::table::printable;
use super::{render_executor, Out};
use crate::client::{Client, Removal};
use crate::wire::ExecutorView;

/// How often `--wait` asks again: handoffs end with a revoke's answer (milliseconds) or a lease
/// (a minute by default), so a second apart is neither late nor a load.
const ASK_AGAIN_EVERY: Duration = Duration::from_secs(1);

/// What `-o json` prints once the executor is gone.
#[derive(Debug, Serialize)]
struct Removed<'a> {
    executor_id: &'a str,
    removed: bool,
}

pub(super) async fn remove_executor(
    client: &Client,
    executor_id: &str,
    wait: Option<Duration>,
    out: &mut Out<'_>,
) -> Result<(), CtlError> {
    let deadline = wait.map(|wait| Instant::now() + wait);
    loop {
        match client.remove_executor(executor_id).await? {
            Removal::Removed => {
                let removed = Removed {
                    executor_id,
                    removed: true,
                };
                return out.show(&removed, |_| {
                    format!("executor {} removed\n", printable(executor_id))
                });
            }
            Removal::Draining(executor) => match deadline {
                None => return show_draining(&executor, out),
                Some(deadline) if Instant::now() >= deadline => {
                    show_draining(&executor, out)?;
                    return Err(CtlError::InProgress(format!(
                        "executor {executor_id}'s shards are still moving; its removal goes on"
                    )));
                }
                Some(_) => tokio::time::sleep(ASK_AGAIN_EVERY).await,
            },
        }
    }
}

fn show_draining(executor: &ExecutorView, out: &mut Out<'_>) -> Result<(), CtlError> {
    out.show(executor, |executor| {
        format!(
            "{}removal under way: it is draining and its shards move by handoff (P5.5); run \
             again once it holds none, or add --wait\n",
            render_executor(executor)
        )
    })
}
