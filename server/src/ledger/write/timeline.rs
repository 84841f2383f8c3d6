//! Events that change no state: transport facts (receives, visibility changes, deletes,
//! suppressed duplicates), heartbeat outcomes and dispatches, one job or many at a time.

use std::collections::HashMap;

use sqlx::AnyConnection;

use super::{event_rows, insert_event_rows, lock_jobs, EventRow, Placed, Reserved};
use crate::ledger::model::NewEvent;
use crate::ledger::{Ledger, LedgerError, Refusal};

/// Most jobs whose sequence numbers one statement reserves.
const RESERVE_CHUNK: usize = 400;

/// One job's reserved place, as the many-jobs reservation returns it.
#[derive(sqlx::FromRow)]
struct ReservedOf {
    job_id: String,
    #[sqlx(flatten)]
    reserved: Reserved,
}

impl Ledger {
    /// Appends one event that changes no state. Returns its sequence number.
    pub async fn record_event(&self, job_id: &str, event: &NewEvent) -> Result<i64, LedgerError> {
        let seq = self
            .append_events(job_id, std::slice::from_ref(event))
            .await?;
        Ok(seq)
    }

    /// Appends events to one job's timeline in one transaction (imports, generated data).
    /// Returns the sequence number of the first.
    pub async fn append_events(
        &self,
        job_id: &str,
        events: &[NewEvent],
    ) -> Result<i64, LedgerError> {
        if events.is_empty() {
            return Ok(0);
        }
        let statement = sqlx::query_as::<_, Reserved>(&self.sql.reserve_events)
            .bind(job_id)
            .bind(events.len() as i64);
        let Some(reserved) = self.try_guarded(job_id, statement).await? else {
            return Err(LedgerError::refused(job_id, Refusal::NotFound));
        };
        Ok(reserved.commit(events).await?.seq)
    }

    /// Appends events to many jobs in one transaction (heartbeat outcomes, dispatches): one
    /// statement reserves the sequence numbers of up to 400 jobs at a time. Events for jobs
    /// that do not exist are skipped.
    pub async fn record_events(&self, events: &[(String, NewEvent)]) -> Result<(), LedgerError> {
        if events.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin_write().await?;
        self.record_events_in(&mut tx, events).await?;
        tx.commit().await?;
        Ok(())
    }

    /// [`Ledger::record_events`] inside the caller's transaction: locks the jobs' rows in
    /// one order first.
    pub(crate) async fn record_events_in(
        &self,
        tx: &mut AnyConnection,
        events: &[(String, NewEvent)],
    ) -> Result<(), LedgerError> {
        let ids = events.iter().map(|(job_id, _)| job_id.as_str());
        lock_jobs(&self.sql, self.backend, &mut *tx, ids).await?;
        let mut rows = Vec::new();
        self.record_events_locked(tx, events, &mut rows).await?;
        insert_event_rows(&self.sql, tx, &rows).await
    }

    /// [`Ledger::record_events_in`] for a transaction that holds the jobs' rows already: the
    /// events' numbers reserved, their rows added to `rows` for the caller to insert. Says of
    /// each event whether it was placed: one for a job that does not exist is not.
    pub(crate) async fn record_events_locked(
        &self,
        tx: &mut AnyConnection,
        events: &[(String, NewEvent)],
        rows: &mut Vec<EventRow>,
    ) -> Result<Vec<bool>, LedgerError> {
        // Several events for one job each need their own sequence number: place them in
        // rounds, each round holding at most one event per job.
        let mut rounds: Vec<Vec<usize>> = Vec::new();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, entry) in events.iter().enumerate() {
            let round = seen.entry(entry.0.as_str()).or_insert(0);
            if rounds.len() <= *round {
                rounds.push(Vec::new());
            }
            rounds[*round].push(i);
            *round += 1;
        }
        let mut placed_at = vec![false; events.len()];
        for round in rounds {
            for chunk in round.chunks(RESERVE_CHUNK) {
                let batched = &self.sql.reserve_event_each;
                let sql = batched.sql();
                let query = sqlx::query_as::<_, ReservedOf>(sql);
                let query = bind_keys!(query, batched, chunk.iter().map(|&i| events[i].0.as_str()));
                let reserved = query.fetch_all(&mut *tx).await?;
                let by_job: HashMap<&str, usize> =
                    chunk.iter().map(|&i| (events[i].0.as_str(), i)).collect();
                let placed: Vec<Placed<'_>> = reserved
                    .iter()
                    .filter_map(|row| {
                        let i = *by_job.get(row.job_id.as_str())?;
                        placed_at[i] = true;
                        Some(Placed {
                            job_id: events[i].0.as_str(),
                            seq: row.reserved.seq,
                            at: row.reserved.at,
                            epoch: row.reserved.epoch,
                            deadline_at: row.reserved.deadline_at,
                            event: &events[i].1,
                        })
                    })
                    .collect();
                rows.extend(event_rows(&placed));
            }
        }
        Ok(placed_at)
    }
}
