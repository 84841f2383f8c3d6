//! The guarded commit: the one accepted result of a job, or — when the owner was fenced out —
//! its answer kept as restricted evidence and `result_rejected` on the timeline.

use std::collections::HashMap;

use sqlx::AnyConnection;

use super::batch::{distinct_rounds, place, ReservedRow};
use super::{
    body_digest, event_rows, insert_result, new_result_ref, EventRow, Intent, NewResult, Reserved,
};
use crate::job::detail;
use crate::job::{Actor, EventKind};
use crate::ledger::model::{Accepted, Answered, NewEvent, Owner, StoredSpend};
use crate::ledger::{Ledger, LedgerError, LedgerMessage, Refusal};

/// An owner's result for its pending attempt.
pub(crate) struct AcceptOp {
    pub(crate) owner: Owner,
    pub(crate) attempt_no: i64,
    pub(crate) body: String,
    /// What the attempt spent, as kept.
    pub(crate) spent: StoredSpend,
    /// The delivery to delete once the result is accepted, in the same transaction.
    pub(crate) delete: Option<Box<AcceptDelete>>,
    /// The caller's transition span, told the sequence numbers its events got.
    pub(crate) span: tracing::Span,
}

/// The delete that goes with an accepted result: the message of one of the ledger's own
/// queues, and the event on the job's timeline for each answer (deleted, or nothing to delete
/// under that handle).
#[derive(Debug, Clone)]
pub struct AcceptDelete {
    pub message: LedgerMessage,
    pub deleted: NewEvent,
    pub not_deleted: NewEvent,
}

impl Ledger {
    /// `running` → `succeeded` with `body` as the one accepted result, only for the current
    /// epoch's pending attempt, with a valid lease, before the deadline. A refused result is
    /// kept as restricted evidence (`stale_discarded`) and recorded as `result_rejected`; it
    /// never becomes the job's result.
    #[tracing::instrument(
        target = "fenceline::trace",
        name = "ledger.transition",
        skip_all,
        fields(
            transition = "accept",
            job_id = owner.job_id(),
            fence = owner.epoch,
            epoch = tracing::field::Empty,
            attempt = attempt_no,
            event_seqs = tracing::field::Empty,
        )
    )]
    pub async fn accept_result(
        &self,
        owner: &Owner,
        attempt_no: i64,
        answer: impl Into<Answered>,
    ) -> Result<Accepted, LedgerError> {
        let answer = answer.into();
        let op = AcceptOp {
            span: tracing::Span::current(),
            owner: owner.clone(),
            attempt_no,
            body: answer.body.clone(),
            spent: answer.kept(),
            delete: None,
        };
        if let Some((accepted, _)) = self.grouped_accept(op).await? {
            return Ok(accepted);
        }
        self.accept_alone(owner, attempt_no, &answer).await
    }

    /// [`Ledger::accept_result`] in a transaction of its own.
    async fn accept_alone(
        &self,
        owner: &Owner,
        attempt_no: i64,
        answer: &Answered,
    ) -> Result<Accepted, LedgerError> {
        let body = answer.body.as_str();
        let spent = answer.kept();
        let job_id = owner.job_id();
        let result_ref = new_result_ref();
        let statement = sqlx::query_as::<_, Reserved>(&self.sql.accept)
            .bind(job_id)
            .bind(owner.epoch)
            .bind(&result_ref)
            .bind(attempt_no);
        let Some(mut fenced) = self.try_guarded(job_id, statement).await? else {
            return Err(self
                .reject_result(owner, attempt_no, &result_ref, answer)
                .await?);
        };
        let now = fenced.row.at;
        let result = NewResult {
            result_ref: &result_ref,
            job_id,
            attempt_no: Some(attempt_no),
            epoch: owner.epoch,
            status: "accepted",
            body,
            at: now,
        };
        insert_result(&mut fenced.tx, &result).await?;
        sqlx::query(
            "UPDATE attempts SET outcome = 'succeeded', finished_at = $4, result_ref = $5, \
             usage = $6, usage_model = $7, tokens = $8, cost_nusd = $9, \
             provider_request_id = COALESCE($10, provider_request_id) \
             WHERE job_id = $1 AND attempt_no = $2 AND epoch = $3",
        )
        .bind(job_id)
        .bind(attempt_no)
        .bind(owner.epoch)
        .bind(now)
        .bind(&result_ref)
        .bind(spent.usage)
        .bind(spent.model)
        .bind(spent.tokens)
        .bind(spent.cost)
        .bind(spent.request_id)
        .execute(&mut *fenced.tx)
        .await?;
        fenced
            .commit(&accept_events(&owner.actor(), attempt_no, &result_ref))
            .await?;
        Ok(Accepted { result_ref })
    }

    /// [`Ledger::accept_result`], with the delete of the delivery the result came from, a
    /// message of this ledger's own queue, in the same transaction: the message goes exactly
    /// when the result becomes durable, and the delete's event follows the acceptance on the
    /// timeline. `Some(deleted)` when the delete went with it (`false`: the handle was
    /// outdated and nothing was deleted); `None` when it did not (no group commit, or the
    /// result went alone): then the caller deletes apart, as after [`Ledger::accept_result`].
    #[tracing::instrument(
        target = "fenceline::trace",
        name = "ledger.transition",
        skip_all,
        fields(
            transition = "accept",
            job_id = owner.job_id(),
            fence = owner.epoch,
            epoch = tracing::field::Empty,
            attempt = attempt_no,
            event_seqs = tracing::field::Empty,
        )
    )]
    pub async fn accept_result_deleting(
        &self,
        owner: &Owner,
        attempt_no: i64,
        answer: impl Into<Answered>,
        delete: AcceptDelete,
    ) -> Result<(Accepted, Option<bool>), LedgerError> {
        let answer = answer.into();
        let op = AcceptOp {
            span: tracing::Span::current(),
            owner: owner.clone(),
            attempt_no,
            body: answer.body.clone(),
            spent: answer.kept(),
            delete: Some(Box::new(delete)),
        };
        if let Some(done) = self.grouped_accept(op).await? {
            return Ok(done);
        }
        Ok((self.accept_alone(owner, attempt_no, &answer).await?, None))
    }

    async fn reject_result(
        &self,
        owner: &Owner,
        attempt_no: i64,
        result_ref: &str,
        answer: &Answered,
    ) -> Result<LedgerError, LedgerError> {
        let body = answer.body.as_str();
        let spent = answer.kept();
        let job_id = owner.job_id();
        let (epoch, actor) = (owner.epoch, owner.actor());
        let refusal = self
            .refusal(job_id, Intent::Finish { epoch, attempt_no })
            .await?;
        if refusal == Refusal::NotFound {
            return Ok(LedgerError::refused(job_id, refusal));
        }
        let statement = sqlx::query_as::<_, Reserved>(&self.sql.reserve_events)
            .bind(job_id)
            .bind(1_i64);
        let Some(mut fenced) = self.try_guarded(job_id, statement).await? else {
            return Ok(LedgerError::refused(job_id, Refusal::NotFound));
        };
        let now = fenced.row.at;
        // Only an attempt of the caller's own epoch can carry its answer as evidence.
        let marked = sqlx::query(
            "UPDATE attempts SET outcome = 'stale_discarded', finished_at = $4, result_ref = $5, \
             usage = $6, usage_model = $7, tokens = $8, cost_nusd = $9, \
             provider_request_id = COALESCE($10, provider_request_id) \
             WHERE job_id = $1 AND attempt_no = $2 AND epoch = $3 \
             AND outcome IN ('pending', 'lost')",
        )
        .bind(job_id)
        .bind(attempt_no)
        .bind(epoch)
        .bind(now)
        .bind(result_ref)
        .bind(spent.usage)
        .bind(spent.model)
        .bind(spent.tokens)
        .bind(spent.cost)
        .bind(spent.request_id)
        .execute(&mut *fenced.tx)
        .await?
        .rows_affected();
        if marked > 0 {
            let evidence = NewResult {
                result_ref,
                job_id,
                attempt_no: Some(attempt_no),
                epoch,
                status: "stale",
                body,
                at: now,
            };
            insert_result(&mut fenced.tx, &evidence).await?;
        }
        let event = NewEvent::new(EventKind::ResultRejected, &actor)
            .epoch(epoch)
            .attempt(attempt_no)
            .detail(detail::ResultRejected {
                reason: refusal.code().to_owned(),
                evidence_ref: (marked > 0).then(|| result_ref.to_owned()),
            });
        fenced.commit(&[event]).await?;
        Ok(LedgerError::refused(job_id, refusal))
    }
}

/// How many events an accepted result records ([`accept_events`]).
pub(super) const ACCEPT_EVENTS: usize = 2;

/// The events of an accepted result: the attempt finished, the result accepted.
pub(super) fn accept_events(
    actor: &Actor,
    attempt_no: i64,
    result_ref: &str,
) -> [NewEvent; ACCEPT_EVENTS] {
    [
        NewEvent::new(EventKind::AttemptFinished, actor)
            .attempt(attempt_no)
            .detail(detail::AttemptFinished {
                outcome: "succeeded".to_owned(),
                ..Default::default()
            }),
        NewEvent::new(EventKind::ResultAccepted, actor)
            .attempt(attempt_no)
            .detail(detail::ResultAccepted {
                result_ref: Some(result_ref.to_owned()),
                to: Some("succeeded".to_owned()),
                ..Default::default()
            }),
    ]
}

/// What a batch of accepts did: each one's accepted result, and the accepted ones that delete
/// their delivery, with the place on the timeline their delete's event takes.
pub(super) type AcceptedMany = (Vec<Option<Accepted>>, Vec<(usize, Reserved)>);

/// The batched form, for group commit ([`super::group`]).
impl Ledger {
    pub(super) async fn accept_many(
        &self,
        tx: &mut AnyConnection,
        ops: &[AcceptOp],
        events_out: &mut Vec<EventRow>,
    ) -> Result<AcceptedMany, LedgerError> {
        let refs: Vec<String> = ops.iter().map(|_| new_result_ref()).collect();
        // The attempt finished, the result accepted, and the delivery's delete if it goes too.
        let places = |op: &AcceptOp| (ACCEPT_EVENTS + usize::from(op.delete.is_some())) as i64;
        // Accepts of one job (one owner's twice, or two owners') go in rounds, the second after
        // the first: in one statement both rows would match the same job row, and which one
        // the update took could not be told from what it returned. In a later round only a
        // row that still matches the job (the current epoch's, not yet terminal) goes through.
        let mut accepted: Vec<(usize, Reserved)> = Vec::with_capacity(ops.len());
        for members in distinct_rounds(ops, |op| op.owner.job_id()) {
            let query = bind_rows!(
                |sql| sqlx::query_as::<_, ReservedRow>(sql),
                self.sql.accept_each,
                &members,
                |&i| [
                    ops[i].owner.job_id(),
                    ops[i].owner.epoch,
                    refs[i].as_str(),
                    ops[i].attempt_no,
                    places(&ops[i]),
                ]
            );
            let index: HashMap<(&str, i64), usize> = members
                .iter()
                .map(|&i| ((ops[i].owner.job_id(), ops[i].owner.epoch), i))
                .collect();
            for row in query.fetch_all(&mut *tx).await? {
                if let Some(&i) = index.get(&(row.job_id.as_str(), row.reserved.epoch)) {
                    let mut reserved = row.reserved;
                    reserved.seq -= places(&ops[i]);
                    accepted.push((i, reserved));
                }
            }
        }
        if accepted.is_empty() {
            return Ok((ops.iter().map(|_| None).collect(), Vec::new()));
        }
        let query = bind_rows!(
            |sql| sqlx::query(sql),
            self.sql.insert_results,
            &accepted,
            |(i, r)| [
                refs[*i].as_str(),
                ops[*i].owner.job_id(),
                ops[*i].attempt_no,
                ops[*i].owner.epoch,
                "accepted",
                ops[*i].body.as_str(),
                body_digest(&ops[*i].body),
                r.at,
            ]
        );
        query.execute(&mut *tx).await?;
        let query = bind_rows!(
            |sql| sqlx::query(sql),
            self.sql.attempts_succeeded,
            &accepted,
            |(i, r)| [
                ops[*i].owner.job_id(),
                ops[*i].attempt_no,
                ops[*i].owner.epoch,
                r.at,
                refs[*i].as_str(),
                ops[*i].spent.usage.as_deref(),
                ops[*i].spent.model.as_deref(),
                ops[*i].spent.tokens,
                ops[*i].spent.cost,
                ops[*i].spent.request_id.as_deref(),
            ]
        );
        query.execute(&mut *tx).await?;
        let events: Vec<(usize, Reserved, Vec<NewEvent>)> = accepted
            .iter()
            .map(|&(i, r)| {
                let op = &ops[i];
                let events = accept_events(&op.owner.actor(), op.attempt_no, &refs[i]);
                (i, r, events.to_vec())
            })
            .collect();
        events_out.extend(event_rows(&place(ops, &events, |op| op.owner.job_id())));
        let mut out: Vec<Option<Accepted>> = ops.iter().map(|_| None).collect();
        let mut refs: Vec<Option<String>> = refs.into_iter().map(Some).collect();
        let mut deleting = Vec::new();
        for (i, reserved) in accepted {
            out[i] = refs[i].take().map(|result_ref| Accepted { result_ref });
            if ops[i].delete.is_some() {
                deleting.push((
                    i,
                    Reserved {
                        seq: reserved.seq + ACCEPT_EVENTS as i64,
                        ..reserved
                    },
                ));
            }
        }
        Ok((out, deleting))
    }
}
