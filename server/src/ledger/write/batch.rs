//! What the batched form of every transition shares: why a batch failed, the rows it reads
//! back, the job rows it locks first, and where its events go on each job's timeline. Group
//! commit ([`super::group`]) runs the batches; each transition's batched form sits beside its
//! single form in that transition's file.

use std::collections::{HashMap, HashSet};

use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};

use super::{Placed, Reserved};
use crate::ledger::model::{Job, NewEvent};
use crate::ledger::read::job_from_row;
use crate::ledger::{Backend, Ledger, LedgerError};

/// Most job rows one locking statement takes.
pub(super) const LOCK_CHUNK: usize = 400;

/// Why a batch did not go through as a whole.
#[derive(Debug)]
pub(crate) enum BatchFailed {
    /// Nothing of it was written: each write goes alone.
    RolledBack(LedgerError),
    /// Its commit got no answer, and whether it landed could not be learned.
    Unknown(LedgerError),
}

impl From<LedgerError> for BatchFailed {
    fn from(error: LedgerError) -> Self {
        BatchFailed::RolledBack(error)
    }
}

impl From<sqlx::Error> for BatchFailed {
    fn from(error: sqlx::Error) -> Self {
        BatchFailed::RolledBack(error.into())
    }
}

/// A job a batched write created or claimed, as the write left it, with the place of its
/// events.
pub(super) struct WrittenJob {
    pub(super) job: Job,
    pub(super) reserved: Reserved,
}

impl WrittenJob {
    pub(super) fn from_row(row: &AnyRow) -> Result<WrittenJob, LedgerError> {
        let job = job_from_row(row)?;
        let reserved = Reserved {
            seq: row.try_get("seq")?,
            at: row.try_get("at")?,
            epoch: job.owner_epoch,
            deadline_at: job.deadline_at,
        };
        Ok(WrittenJob { job, reserved })
    }
}

/// A job a batched claim took, with its stored input and model (JSON text).
pub(super) struct ClaimedRow {
    pub(super) written: WrittenJob,
    pub(super) input: Option<(String, String)>,
}

impl ClaimedRow {
    pub(super) fn from_row(row: &AnyRow) -> Result<ClaimedRow, LedgerError> {
        let input: Option<String> = row.try_get("input")?;
        let model: Option<String> = row.try_get("model")?;
        Ok(ClaimedRow {
            written: WrittenJob::from_row(row)?,
            input: input.zip(model),
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct ReservedRow {
    pub(super) job_id: String,
    #[sqlx(flatten)]
    pub(super) reserved: Reserved,
}

impl Ledger {
    /// Locks the rows of `job_ids` in job-id order, skipping those another transaction
    /// holds, and gives back the ids it locked (PostgreSQL; `None` on SQLite, whose single
    /// writer holds every row).
    pub(super) async fn lock_free_jobs<'a>(
        &self,
        tx: &mut AnyConnection,
        job_ids: impl IntoIterator<Item = &'a str>,
    ) -> Result<Option<HashSet<String>>, LedgerError> {
        if self.backend != Backend::Postgres {
            return Ok(None);
        }
        let mut ids: Vec<&str> = job_ids.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        let mut free = HashSet::with_capacity(ids.len());
        for chunk in ids.chunks(LOCK_CHUNK) {
            let sql = self.sql.lock_free_jobs.sql();
            let query = sqlx::query_scalar::<_, String>(sql);
            let query = bind_keys!(query, self.sql.lock_free_jobs, chunk.iter().copied());
            free.extend(query.fetch_all(&mut *tx).await?);
        }
        Ok(Some(free))
    }
}

/// The writes (and their answer slots) whose job rows this transaction locked.
pub(super) fn only_free<T>(
    ops: Vec<T>,
    slots: &mut Vec<usize>,
    free: &HashSet<String>,
    job_id: impl Fn(&T) -> &str,
) -> (Vec<T>, Vec<usize>) {
    ops.into_iter()
        .zip(std::mem::take(slots))
        .filter(|(op, _)| free.contains(job_id(op)))
        .unzip()
}

/// The indexes of `ops` in rounds in which no job appears twice, each in the order given: the
/// first write of every job in the first round, a job's second write in the second, and so on.
/// Nearly always one round.
pub(super) fn distinct_rounds<'a, Op>(
    ops: &'a [Op],
    job_id: impl Fn(&'a Op) -> &'a str,
) -> Vec<Vec<usize>> {
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        let round = seen.entry(job_id(op)).or_insert(0);
        if *round == rounds.len() {
            rounds.push(Vec::new());
        }
        rounds[*round].push(i);
        *round += 1;
    }
    rounds
}

/// The events of many jobs' writes at the places their statements reserved.
pub(super) fn place<'a, Op>(
    ops: &'a [Op],
    events: &'a [(usize, Reserved, Vec<NewEvent>)],
    job_id: impl Fn(&'a Op) -> &'a str,
) -> Vec<Placed<'a>> {
    let mut placed = Vec::new();
    for (i, r, list) in events {
        let id = job_id(&ops[*i]);
        for (k, event) in list.iter().enumerate() {
            placed.push(Placed {
                job_id: id,
                seq: r.seq + k as i64,
                at: r.at,
                epoch: r.epoch,
                deadline_at: r.deadline_at,
                event,
            });
        }
    }
    placed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job's second write waits for a round after its first, a third for one after that;
    /// every other write goes in the first round, each round in the order given.
    #[test]
    fn each_round_holds_a_job_once_in_the_order_given() {
        let ops = ["a", "b", "a", "c", "a", "b"];
        assert_eq!(
            distinct_rounds(&ops, |op| op),
            [vec![0, 1, 3], vec![2, 5], vec![4]]
        );
        let once = ["a", "b", "c"];
        assert_eq!(distinct_rounds(&once, |op| op), [vec![0, 1, 2]]);
        assert!(distinct_rounds(&[] as &[&str], |op| op).is_empty());
    }
}
