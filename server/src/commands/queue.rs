//! `fenceline queue create`: an SQS queue and its dead-letter queue.

use std::time::Duration;

use anyhow::Context;

use fenceline::queue::sqs::SqsQueue;
use fenceline::settings::QueueCommand;

pub(super) async fn run(command: &QueueCommand) -> anyhow::Result<()> {
    let QueueCommand::Create {
        name,
        max_receive_count,
    } = command;
    let client = SqsQueue::client_from_env().await;
    let queue = SqsQueue::create(client, name, *max_receive_count, Duration::from_secs(10))
        .await
        .context("creating the SQS queue")?;
    use fenceline::queue::Queue;
    println!(
        "created {} with dead-letter queue {name}-dlq",
        queue.describe()
    );
    Ok(())
}
