//! Attempts and leases: an owner records each attempt before calling the provider, keeps the
//! provider's request id on it, and renews its lease.

use std::collections::HashMap;
use std::time::Duration;

use sqlx::AnyConnection;

use super::{insert_events, lock_jobs, micros, reserves, Intent, Placed, Reserved};
use crate::job::detail;
use crate::job::{Actor, EventKind};
use crate::ledger::model::{AttemptStarted, NewEvent, Owner, Renewal};
use crate::ledger::{Ledger, LedgerError, LedgerMessage, Refusal, VisibilityChange};

/// A lease to renew with its delivery's visibility, the message being one of the ledger's own
/// queue's ([`Ledger::renew_leases_with_visibility`]).
#[derive(Debug, Clone)]
pub struct RenewBoth {
    pub job_id: String,
    pub epoch: i64,
    /// The message and the visibility timeout to give it; `None` when none is asked (the
    /// deadline or the 12-hour cap reached).
    pub visibility: Option<(LedgerMessage, Duration)>,
}

/// Largest number of jobs renewed by one statement.
const RENEW_CHUNK: usize = 400;

#[derive(sqlx::FromRow)]
struct StartRow {
    attempt_count: i64,
    #[sqlx(flatten)]
    reserved: Reserved,
}
reserves!(StartRow);

#[derive(sqlx::FromRow)]
struct RenewRow {
    job_id: String,
    owner_until: i64,
    #[sqlx(flatten)]
    reserved: Reserved,
}

impl RenewRow {
    /// This renewal's `lease_renewed`, from `base`, with the lease it granted.
    fn renewed(&self, base: &NewEvent) -> NewEvent {
        let lease_ms = (self.owner_until - self.reserved.at) / 1000;
        base.clone().detail(detail::LeaseRenewed { lease_ms })
    }

    /// Renewed rows by `(job_id, epoch)`, as their renewals were asked.
    fn by_owner(rows: &[RenewRow]) -> HashMap<(&str, i64), &RenewRow> {
        rows.iter()
            .map(|row| ((row.job_id.as_str(), row.reserved.epoch), row))
            .collect()
    }

    /// `event` in the place `then` after this renewal's `lease_renewed`.
    fn place<'a>(&'a self, then: i64, event: &'a NewEvent) -> Placed<'a> {
        Placed {
            job_id: &self.job_id,
            seq: self.reserved.seq + then,
            at: self.reserved.at,
            epoch: self.reserved.epoch,
            deadline_at: self.reserved.deadline_at,
            event,
        }
    }
}

pub(super) async fn insert_attempt(
    conn: &mut AnyConnection,
    job_id: &str,
    attempt: &AttemptStarted,
    worker_id: &str,
    provider: &str,
    at: i64,
) -> Result<(), LedgerError> {
    sqlx::query(
        "INSERT INTO attempts (job_id, attempt_no, epoch, worker_id, provider, \
         provider_request_id, started_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(job_id)
    .bind(attempt.attempt_no)
    .bind(attempt.epoch)
    .bind(worker_id)
    .bind(provider)
    .bind(attempt.client_request_id(job_id))
    .bind(at)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

impl Ledger {
    /// Records attempt `attempt_count + 1` under the owner's epoch, durably, before any
    /// provider request, with Fenceline's client request id for it (see
    /// [`AttemptStarted::client_request_id`]). Refused unless the owner holds a valid lease at
    /// the current epoch, the budget and the deadline allow, and no earlier attempt of this
    /// owner is still without an outcome.
    #[tracing::instrument(
        target = "fenceline::trace",
        name = "ledger.transition",
        skip_all,
        fields(
            transition = "start_attempt",
            job_id = owner.job_id(),
            fence = owner.epoch,
            epoch = tracing::field::Empty,
            event_seqs = tracing::field::Empty,
        )
    )]
    pub async fn start_attempt(
        &self,
        owner: &Owner,
        provider: &str,
    ) -> Result<AttemptStarted, LedgerError> {
        let job_id = owner.job_id();
        let statement = sqlx::query_as::<_, StartRow>(&self.sql.start_attempt)
            .bind(job_id)
            .bind(owner.epoch);
        let intent = Intent::StartAttempt { epoch: owner.epoch };
        let mut fenced = self.guarded(job_id, statement, intent).await?;
        let attempt = AttemptStarted {
            attempt_no: fenced.row.attempt_count,
            epoch: owner.epoch,
        };
        let at = fenced.row.reserved.at;
        insert_attempt(
            &mut fenced.tx,
            job_id,
            &attempt,
            &owner.worker_id,
            provider,
            at,
        )
        .await?;
        let event = NewEvent::new(EventKind::AttemptStarted, &owner.actor())
            .attempt(attempt.attempt_no)
            .detail(detail::AttemptStarted {
                provider: provider.to_owned(),
            });
        fenced.commit(&[event]).await?;
        Ok(attempt)
    }

    /// Keeps the id the provider gave the owner's pending attempt `attempt_no` to run in the
    /// background, durably and fenced, before any waiting for its answer
    /// (`attempt_submitted`): from then on a later owner adopts the attempt and polls it by
    /// this id instead of running the model again.
    #[tracing::instrument(
        target = "fenceline::trace",
        name = "ledger.transition",
        skip_all,
        fields(
            transition = "record_submitted",
            job_id = owner.job_id(),
            fence = owner.epoch,
            epoch = tracing::field::Empty,
            attempt = attempt_no,
            event_seqs = tracing::field::Empty,
        )
    )]
    pub async fn record_submitted(
        &self,
        owner: &Owner,
        attempt_no: i64,
        provider: &str,
        provider_id: &str,
    ) -> Result<(), LedgerError> {
        let job_id = owner.job_id();
        let statement = sqlx::query_as::<_, Reserved>(&self.sql.record_submitted)
            .bind(job_id)
            .bind(owner.epoch)
            .bind(attempt_no);
        let intent = Intent::Finish {
            epoch: owner.epoch,
            attempt_no,
        };
        let mut fenced = self.guarded(job_id, statement, intent).await?;
        sqlx::query(
            "UPDATE attempts SET submitted_id = $3, submitted_at = $4 \
             WHERE job_id = $1 AND attempt_no = $2 AND outcome = 'pending'",
        )
        .bind(job_id)
        .bind(attempt_no)
        .bind(provider_id)
        .bind(fenced.row.at)
        .execute(&mut *fenced.tx)
        .await?;
        let event = NewEvent::new(EventKind::AttemptSubmitted, &owner.actor())
            .attempt(attempt_no)
            .detail(detail::AttemptSubmitted {
                provider: provider.to_owned(),
                provider_id: provider_id.to_owned(),
            });
        fenced.commit(&[event]).await?;
        Ok(())
    }

    /// Keeps the provider's own request id on the owner's attempt, as evidence: only while
    /// the caller's epoch is the job's.
    pub async fn set_provider_request_id(
        &self,
        owner: &Owner,
        attempt_no: i64,
        provider_request_id: &str,
    ) -> Result<(), LedgerError> {
        sqlx::query(
            "UPDATE attempts SET provider_request_id = $4 \
             WHERE job_id = $1 AND attempt_no = $2 AND epoch = $3 \
             AND EXISTS (SELECT 1 FROM jobs j WHERE j.job_id = $1 AND j.owner_epoch = $3)",
        )
        .bind(owner.job_id())
        .bind(attempt_no)
        .bind(owner.epoch)
        .bind(provider_request_id)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// Renews the leases of many owned jobs in one statement per chunk. Each `(job_id, epoch)`
    /// gets its new expiry (never past the deadline) or the reason it was refused; a refusal
    /// is also put on that job's timeline as `lease_renewal_failed`. Nothing is reserved for
    /// what comes after: an event known only later (the outcome of a visibility renewal that
    /// went beside it) takes the next number when it is written, so a write that never comes
    /// leaves no hole in the timeline.
    pub async fn renew_leases(
        &self,
        worker_id: &str,
        leases: &[(String, i64)],
        lease: Duration,
    ) -> Result<Vec<Renewal>, LedgerError> {
        let actor = Actor::Worker(worker_id.to_owned());
        let renewed_event = NewEvent::new(EventKind::LeaseRenewed, &actor);
        let mut out = Vec::with_capacity(leases.len());
        for chunk in leases.chunks(RENEW_CHUNK) {
            let query = bind_rows!(
                |sql| sqlx::query_as::<_, RenewRow>(sql).bind(micros(lease)),
                &self.sql.renew_leases,
                chunk,
                |(job_id, epoch)| [job_id.as_str(), *epoch]
            );
            let mut tx = self.begin_write().await?;
            let ids = chunk.iter().map(|(job_id, _)| job_id.as_str());
            lock_jobs(&self.sql, self.backend, &mut tx, ids).await?;
            let rows = query.fetch_all(&mut *tx).await?;
            let events: Vec<NewEvent> =
                rows.iter().map(|row| row.renewed(&renewed_event)).collect();
            let placed: Vec<Placed<'_>> = rows
                .iter()
                .zip(&events)
                .map(|(row, event)| row.place(0, event))
                .collect();
            insert_events(&self.sql, &mut tx, &placed).await?;
            tx.commit().await?;
            let renewed = RenewRow::by_owner(&rows);
            for (job_id, epoch) in chunk {
                let granted = renewed.get(&(job_id.as_str(), *epoch));
                let outcome = match granted {
                    Some(row) => Ok(row.owner_until),
                    None => Err(self.lease_refused(&actor, job_id, *epoch, None).await?),
                };
                out.push(Renewal {
                    job_id: job_id.clone(),
                    epoch: *epoch,
                    outcome,
                    at: granted.map_or(0, |row| row.reserved.at),
                });
            }
        }
        Ok(out)
    }

    /// One heartbeat's renewals for jobs whose deliveries are messages of this ledger's own
    /// queue: for each, the visibility change, the lease renewal, `lease_renewed` and the
    /// visibility's outcome right after it, in one transaction a chunk. Each renewal is still
    /// its own compare-and-set: a refused visibility change leaves the lease renewed and a
    /// refused lease leaves the visibility changed. `visibility_event(i, change)` gives the
    /// event for the outcome of `renewals[i]`'s visibility (`None` when none was asked).
    ///
    /// A refused lease gets `lease_renewal_failed` and its visibility event after the commit,
    /// each in a place of its own, as [`Ledger::renew_leases`] records it.
    ///
    /// Chunks commit one after another: the answer holds every renewal whose chunk committed
    /// and whose outcome is on its timeline, and the error that left the others out.
    pub async fn renew_leases_with_visibility(
        &self,
        worker_id: &str,
        renewals: &[RenewBoth],
        lease: Duration,
        cap: Duration,
        visibility_event: impl Fn(usize, Option<&VisibilityChange>) -> NewEvent,
    ) -> RenewedWithVisibility {
        let mut out = RenewedWithVisibility {
            renewed: Vec::with_capacity(renewals.len()),
            failed: None,
        };
        for (c, chunk) in renewals.chunks(RENEW_CHUNK).enumerate() {
            let first = c * RENEW_CHUNK;
            let done = self
                .renew_chunk_with_visibility(
                    worker_id,
                    first,
                    chunk,
                    (lease, cap),
                    &visibility_event,
                )
                .await;
            match done {
                Ok((renewed, failed)) => {
                    out.renewed.extend(renewed);
                    if failed.is_some() {
                        out.failed = failed;
                        break;
                    }
                }
                Err(error) => {
                    out.failed = Some(error);
                    break;
                }
            }
        }
        out
    }

    /// One chunk of [`Ledger::renew_leases_with_visibility`]: an error when it did not commit;
    /// once committed, its answers, and the error that kept a refused lease's events from its
    /// timeline (that renewal left out).
    #[allow(clippy::type_complexity)]
    async fn renew_chunk_with_visibility(
        &self,
        worker_id: &str,
        first: usize,
        chunk: &[RenewBoth],
        (lease, cap): (Duration, Duration),
        visibility_event: &impl Fn(usize, Option<&VisibilityChange>) -> NewEvent,
    ) -> Result<
        (
            Vec<(Renewal, Option<VisibilityChange>)>,
            Option<LedgerError>,
        ),
        LedgerError,
    > {
        let statement = &self.sql.renew_leases_with_visibility;
        let actor = Actor::Worker(worker_id.to_owned());
        let renewed_event = NewEvent::new(EventKind::LeaseRenewed, &actor);
        let mut out = Vec::with_capacity(chunk.len());
        let mut tx = self.begin_write().await?;
        // The jobs first, in one order, as every write that locks jobs and messages does.
        let ids = chunk.iter().map(|r| r.job_id.as_str());
        lock_jobs(&self.sql, self.backend, &mut tx, ids).await?;
        let mut changes: Vec<Option<VisibilityChange>> = vec![None; chunk.len()];
        let mut queues: Vec<&str> = chunk
            .iter()
            .filter_map(|r| r.visibility.as_ref().map(|(m, _)| m.queue()))
            .collect();
        queues.sort_unstable();
        queues.dedup();
        for queue in queues {
            let (at, asked): (Vec<usize>, Vec<(i64, String, Duration)>) = chunk
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    let (message, timeout) = r.visibility.as_ref()?;
                    let (q, id, hash) = &message.0;
                    (q == queue).then(|| (i, (*id, hash.clone(), *timeout)))
                })
                .unzip();
            let answers = self
                .queue_change_visibility_in(&mut tx, queue, &asked, cap)
                .await?;
            for (i, answer) in at.into_iter().zip(answers) {
                changes[i] = Some(answer);
            }
        }
        let rows = bind_rows!(
            |sql| sqlx::query_as::<_, RenewRow>(sql).bind(micros(lease)),
            statement,
            chunk,
            |r| [r.job_id.as_str(), r.epoch]
        )
        .fetch_all(&mut *tx)
        .await?;
        let renewed = RenewRow::by_owner(&rows);
        let mut events = Vec::with_capacity(rows.len() * 2);
        for (i, r) in chunk.iter().enumerate() {
            if let Some(row) = renewed.get(&(r.job_id.as_str(), r.epoch)) {
                events.push((*row, 0, row.renewed(&renewed_event)));
                events.push((*row, 1, visibility_event(first + i, changes[i].as_ref())));
            }
        }
        let placed: Vec<Placed<'_>> = events
            .iter()
            .map(|(row, then, event)| row.place(*then, event))
            .collect();
        insert_events(&self.sql, &mut tx, &placed).await?;
        tx.commit().await?;
        self.renewal_answer_delay().await;
        let mut failed = None;
        for (i, (r, change)) in chunk.iter().zip(changes).enumerate() {
            let granted = renewed.get(&(r.job_id.as_str(), r.epoch));
            let outcome = match granted {
                Some(row) => Ok(row.owner_until),
                None => {
                    let visibility = visibility_event(first + i, change.as_ref());
                    match self
                        .lease_refused(&actor, &r.job_id, r.epoch, Some(visibility))
                        .await
                    {
                        Ok(refusal) => Err(refusal),
                        Err(error) => {
                            failed = Some(error);
                            continue;
                        }
                    }
                }
            };
            let renewal = Renewal {
                job_id: r.job_id.clone(),
                epoch: r.epoch,
                outcome,
                at: granted.map_or(0, |row| row.reserved.at),
            };
            out.push((renewal, change));
        }
        Ok((out, failed))
    }

    /// Why the lease of `job_id` at `epoch` was not renewed, put on its timeline as
    /// `lease_renewal_failed`, followed by `then` (the outcome of the visibility renewal that
    /// went with it), unless the job is gone.
    async fn lease_refused(
        &self,
        actor: &Actor,
        job_id: &str,
        epoch: i64,
        then: Option<NewEvent>,
    ) -> Result<Refusal, LedgerError> {
        let refusal = self.refusal(job_id, Intent::Owner { epoch }).await?;
        if refusal != Refusal::NotFound {
            let failed = NewEvent::new(EventKind::LeaseRenewalFailed, actor)
                .epoch(epoch)
                .detail(detail::LeaseRenewalFailed {
                    reason: refusal.code().to_owned(),
                });
            let events: Vec<(String, NewEvent)> = std::iter::once(failed)
                .chain(then)
                .map(|event| (job_id.to_owned(), event))
                .collect();
            self.record_events(&events).await?;
        }
        Ok(refusal)
    }

    /// Makes the answers of the next `commits` renewals with visibility
    /// ([`Ledger::renew_leases_with_visibility`]) arrive `delay` after they committed, as
    /// over a slow network. Only in test builds.
    #[cfg(feature = "sabotage")]
    pub fn slow_renewal_answers(&self, commits: u32, delay: Duration) {
        *self.slow_renewals.lock().expect("slow renewals") = (commits, delay);
    }

    async fn renewal_answer_delay(&self) {
        #[cfg(feature = "sabotage")]
        {
            let delay = {
                let mut slow = self.slow_renewals.lock().expect("slow renewals");
                (slow.0 > 0).then(|| {
                    slow.0 -= 1;
                    slow.1
                })
            };
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// What [`Ledger::renew_leases_with_visibility`] came to.
#[derive(Debug)]
pub struct RenewedWithVisibility {
    /// Each renewal the ledger answered, with its visibility change; their events are on the
    /// jobs' timelines.
    pub renewed: Vec<(Renewal, Option<VisibilityChange>)>,
    /// Why the renewals left out have no answer: they may or may not have happened.
    pub failed: Option<LedgerError>,
}
