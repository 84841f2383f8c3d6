//! `fenceline bench …`: each benchmark beside its reference.

use fenceline::ledger::LedgerOptions;
use fenceline::settings::{BenchCommand, Settings};

pub(super) async fn run(settings: &Settings, command: &BenchCommand) -> anyhow::Result<()> {
    let (url, options) = (settings.ledger.url.as_str(), &settings.ledger.options);
    match command {
        BenchCommand::Ledger(args) => {
            let report = fenceline::bench::ledger(url, options, args).await?;
            println!("{report}");
            Ok(())
        }
        BenchCommand::Pipeline(args) => {
            let report = fenceline::bench::pipeline(url, options, args).await?;
            println!("{report}");
            Ok(())
        }
        BenchCommand::Console(args) => {
            let report = fenceline::bench::console(settings, args).await?;
            println!("{report}");
            Ok(())
        }
        BenchCommand::Submit(args) => {
            let report = fenceline::bench::submit(settings, args).await?;
            println!("{report}");
            Ok(())
        }
        BenchCommand::Throttle(args) => {
            println!("{}", fenceline::bench::throttle(args).await?);
            Ok(())
        }
        BenchCommand::Fairness(args) => {
            println!("{}", fenceline::bench::fairness(args).await?);
            Ok(())
        }
        BenchCommand::SeedTimeline(args) => {
            // The seed claims the job it creates. Its message waits in the outbox for a
            // dispatcher instead of going into the queue with the job, so a worker already
            // serving this ledger (a demo beside `serve`) does not receive it and claim first.
            let options = &LedgerOptions {
                direct_queue: None,
                ..options.clone()
            };
            let ledger = super::open_ledger_with(settings, options).await?;
            let job_id =
                fenceline::bench::seed_timeline(&ledger, &args.tenant, args.events, &args.pattern)
                    .await?;
            println!("{job_id}");
            Ok(())
        }
        BenchCommand::Renewals(args) => {
            let report = fenceline::bench::renewals(url, options, args).await?;
            println!("{report}");
            Ok(())
        }
    }
}
