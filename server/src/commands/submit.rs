//! `fenceline submit`: jobs through the HTTP API, as any service would submit them.

use std::time::Duration;

use anyhow::Context;

/// `fenceline submit`: the HTTP API, as any service would use it.
pub(super) async fn run(args: &fenceline::settings::SubmitArgs) -> anyhow::Result<()> {
    use fenceline::http::contract::{CreateJobRequest, JobResult, JobView};
    use fenceline::job::JobState;
    use serde_json::Value;
    if let Some(file) = &args.file {
        return submit_file(args, file).await;
    }
    let (Some(key), Some(input)) = (&args.key, &args.input) else {
        anyhow::bail!("--key and --input name the job (or --file many)");
    };
    let input: Value = serde_json::from_str(input).unwrap_or_else(|_| Value::String(input.clone()));
    let model: Value =
        serde_json::from_str(&args.model).context("--model must be a JSON object")?;
    let request = CreateJobRequest {
        idempotency_key: key.clone(),
        input,
        contract_version: "v1".into(),
        model,
        deadline_seconds: args.deadline_seconds,
        max_attempts: args.max_attempts,
        replay_policy: None,
    };
    let api = args.api.trim_end_matches('/');
    let client = reqwest::Client::new();
    let response = post_to_api(&client, api, &args.token, "/api/v1/jobs", &request).await?;
    let status = response.status();
    let job: JobView = response.json().await.context("reading the answer")?;
    let job_id = job.job_id;
    eprintln!(
        "{} job {job_id} ({}); console: {api}/jobs/{job_id}",
        if status.as_u16() == 201 {
            "created"
        } else {
            "already had"
        },
        job.state
    );
    if !args.wait {
        println!("{job_id}");
        return Ok(());
    }
    loop {
        let job: JobView = client
            .get(format!("{api}/api/v1/jobs/{job_id}"))
            .bearer_auth(&args.token)
            .send()
            .await?
            .json()
            .await?;
        if job.state == JobState::Unknown {
            anyhow::bail!(
                "job {job_id} is unknown: a model call may have run with no answer seen, and it \
                 waits for a decision (provider retrieval, a replay policy, or an operator). \
                 Console: {api}/jobs/{job_id}"
            );
        }
        if job.terminal {
            if job.state == JobState::Succeeded {
                let result: JobResult = client
                    .get(format!("{api}/api/v1/jobs/{job_id}/result"))
                    .bearer_auth(&args.token)
                    .send()
                    .await?
                    .json()
                    .await?;
                println!("{}", serde_json::to_string_pretty(&result.result)?);
                return Ok(());
            }
            anyhow::bail!(
                "job {job_id} ended {} ({})",
                job.state,
                job.error_code.as_deref().unwrap_or("no error code")
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// POSTs `body` to the API at `path`; a refusal is an error carrying the API's message.
async fn post_to_api(
    client: &reqwest::Client,
    api: &str,
    token: &str,
    path: &str,
    body: &impl serde::Serialize,
) -> anyhow::Result<reqwest::Response> {
    use fenceline::http::contract::ErrorBody;
    let response = client
        .post(format!("{api}{path}"))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .with_context(|| format!("reaching {api}"))?;
    let status = response.status();
    if !status.is_success() {
        let message = response
            .json::<ErrorBody>()
            .await
            .map_or_else(|_| "request refused".to_owned(), |e| e.error.message);
        anyhow::bail!("{status}: {message}");
    }
    Ok(response)
}

/// `fenceline submit --file`: one job a line, sent in batches; one answer a line, in order.
async fn submit_file(
    args: &fenceline::settings::SubmitArgs,
    file: &std::path::Path,
) -> anyhow::Result<()> {
    use fenceline::http::contract::{BatchResponse, MAX_BATCH};
    use serde_json::Value;
    let text = if file == std::path::Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .context("reading standard input")?;
        text
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    // Each job with its line number; a line that is not JSON is answered here.
    let mut jobs: Vec<(usize, Value)> = Vec::new();
    let (mut created, mut existing, mut refused) = (0, 0, Vec::new());
    let mut answers: Vec<(usize, String)> = Vec::new();
    for (n, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())) {
        if line.is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(job) => jobs.push((n, job)),
            Err(e) => {
                refused.push(n);
                answers.push((n, format!("{n}\t-\tnot JSON: {e}")));
            }
        }
    }
    let api = args.api.trim_end_matches('/');
    let client = reqwest::Client::new();
    for chunk in jobs.chunks(MAX_BATCH) {
        let body = serde_json::json!({ "jobs": chunk.iter().map(|(_, j)| j).collect::<Vec<_>>() });
        let sent = async {
            post_to_api(&client, api, &args.token, "/api/v1/jobs/batch", &body)
                .await?
                .json::<BatchResponse>()
                .await
                .context("reading the answer")
        };
        let batch = match sent.await {
            Ok(batch) => batch,
            Err(error) => {
                // What was answered before stays on record; from this line on nothing is known.
                let first = chunk[0].0;
                answers.sort_by_key(|(n, _)| *n);
                for (_, line) in answers.iter().filter(|(n, _)| *n < first) {
                    println!("{line}");
                }
                return Err(error.context(format!(
                    "sending the jobs from line {first} on; the lines above were answered, \
                     and sending the file again is safe (the same key and job make nothing new)"
                )));
            }
        };
        created += batch.created;
        existing += batch.existing;
        for ((n, _), item) in chunk.iter().zip(batch.jobs) {
            let what = match (item.job, item.error) {
                (Some(job), _) => job.job_id,
                (None, Some(error)) => {
                    refused.push(*n);
                    // The line number says which job; the batch's index would mislead.
                    match error.message.strip_prefix("jobs[") {
                        Some(rest) => rest
                            .split_once("] is ")
                            .map_or(error.message.clone(), |(_, why)| why.to_owned()),
                        None => error.message,
                    }
                }
                (None, None) => {
                    refused.push(*n);
                    "no answer".to_owned()
                }
            };
            answers.push((*n, format!("{n}\t{}\t{what}", item.status)));
        }
    }
    answers.sort_by_key(|(n, _)| *n);
    for (_, line) in &answers {
        println!("{line}");
    }
    refused.sort_unstable();
    eprintln!(
        "created {created}, already had {existing}, refused {}{}",
        refused.len(),
        if refused.is_empty() {
            String::new()
        } else {
            format!(
                " (lines {})",
                refused
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
    if !refused.is_empty() {
        anyhow::bail!("{} of the jobs were refused", refused.len());
    }
    Ok(())
}
