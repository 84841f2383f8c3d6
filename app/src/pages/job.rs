//! `/jobs/{job_id}`: the page operators paste into incident reviews. A header with where the
//! job stands, the swimlane chart on one time axis, the event table with a permalink per event
//! (`#e{seq}`, highlighted when targeted), runs of same-kind events folded, attempts,
//! decisions, and exports. Refreshes itself while the job is live.

use crate::action::{EVIDENCE_MAXLENGTH, REASON_MAXLENGTH};
use crate::svg::SvgChart;
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};

use super::console;
use crate::components::{
    or_dash, BadParameter, BadParameterPage, ErrorBox, LiveRefresh, ShareLink, StateBadge,
};
use crate::console::{Timeline, TimelineQuery, TimelineRow, Zoom};

fn number(v: Option<String>) -> Option<i64> {
    v.and_then(|s| s.trim().parse().ok())
}

#[component]
pub fn JobPage() -> impl IntoView {
    let job_id = use_params_map().with_untracked(|p| p.get("job_id").unwrap_or_default());
    let query = use_query_map().with_untracked(|q| TimelineQuery {
        after: number(q.get("after")),
        around: number(q.get("around")),
        open: number(q.get("open")),
    });
    // A position on the timeline that is not an event number is a bad address.
    let bad = use_query_map().with_untracked(|q| {
        ["after", "around", "open"].into_iter().find_map(|name| {
            let value = q.get(name)?;
            let value = value.trim();
            (!value.is_empty() && value.parse::<i64>().is_err())
                .then(|| BadParameter::new(name, value, "an event number (the # column)"))
        })
    });
    // `?from=&to=`: the swimlane zoomed on a stretch (ms after creation).
    let zoom_text = use_query_map().with_untracked(|q| (q.get("from"), q.get("to")));
    let zoom = match parse_zoom(zoom_text.0.as_deref(), zoom_text.1.as_deref()) {
        Ok(zoom) => zoom,
        Err(bad) => {
            return view! {
                <Title text="Bad address · Fenceline"/>
                <BadParameterPage bad back=format!("/jobs/{job_id}")/>
            }
            .into_any()
        }
    };
    // `?act=cancel`: the cancel form, on a page that holds still while the reason is typed.
    let cancel_form = use_query_map().with_untracked(|q| q.get("act").as_deref() == Some("cancel"));
    let console = console();
    let visitor = super::visitor();
    if let Some(bad) = bad {
        return view! {
            <Title text="Bad address · Fenceline"/>
            <BadParameterPage bad back=format!("/jobs/{job_id}")/>
        }
        .into_any();
    }
    view! {
        <Title text=format!("{job_id} · Fenceline")/>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {Suspend::new(async move {
                // The header and chart, and the event table: read side by side.
                let (detail, timeline) = futures::future::join(
                    console.job(job_id.clone(), zoom),
                    console.timeline(job_id.clone(), query.clone()),
                )
                .await;
                let detail = match detail {
                    Err(message) => return view! { <ErrorBox message/> }.into_any(),
                    Ok(None) => return {
                        crate::console::HttpStatus::set(404);
                        view! {
                        <h1>"No such job"</h1>
                        <p>{format!("There is no job {job_id} in this ledger (or it was pruned after the retention period).")}</p>
                        <p><a href="/jobs">"Back to the jobs list"</a></p>
                    }.into_any()},
                    Ok(Some(detail)) => detail,
                };
                let timeline = match timeline {
                    Err(message) => return view! { <ErrorBox message/> }.into_any(),
                    Ok(t) => t,
                };
                // An `unknown` job waits for a decision: no refresh under an operator's typing.
                let live = !detail.terminal && detail.state != "unknown" && !cancel_form;
                let deciding = detail.state == "unknown" && visitor.can_act();
                let cancelling = detail.cancellable && visitor.can_act();
                let d = detail;
                view! {
                    <header class="job-header">
                        <h1><span class="mono">{d.job_id.clone()}</span> " " <StateBadge state=d.state.clone()/></h1>
                        <p class="muted">
                            {format!("tenant {} · key {} · created {}", d.tenant, d.idempotency_key, d.created)}
                        </p>
                        <ShareLink/>
                        <LiveRefresh live seconds=2/>
                        <dl class="facts wide">
                            <dt>"Owner epoch"</dt><dd class="num">{d.epoch}</dd>
                            // Only a running job has an owner now; otherwise this is who had it last.
                            <dt>{if d.state == "running" { "Owner" } else { "Last owner" }}</dt><dd>{or_dash(d.owner)}</dd>
                            <dt>"Lease until"</dt><dd>{or_dash(d.lease)}</dd>
                            <dt>"Deadline"</dt><dd>{format!("{} ({})", d.deadline, d.deadline_left)}</dd>
                            <dt>"Attempts"</dt><dd>{d.attempts_used}</dd>
                            <dt>"Spend"</dt><dd class="spend">{d.spend.spent.clone()}
                                {d.spend.duplicate.clone().map(|dup| view! { <br/><span class="duplicate-spend">{format!("Duplicate spend: {dup}")}</span> })}
                                {d.spend.at_risk.clone().map(|risk| view! { <br/><span class="at-risk">{format!("At risk: {risk}")}</span> })}
                                {d.spend.by_provider.clone().map(|each| view! { <br/><span class="by-provider">{format!("By provider: {each}")}</span> })}</dd>
                            {d.route.clone().map(|r| view! { <dt>"Provider now"</dt><dd class="route">{r}</dd> })}
                            {d.waiting_for.map(|w| view! { <dt>"Waiting for"</dt><dd class="waiting-for">{w}</dd> })}
                            <dt>"Result"</dt><dd>{match d.result_ref {
                                Some(r) => view! { <a href=format!("/jobs/{}/result", d.job_id) title="Opens the accepted result; the read is audited">{r}</a> }.into_any(),
                                None => view! { <span>"—"</span> }.into_any(),
                            }}</dd>
                            <dt>"Last error"</dt><dd>{or_dash(d.error_code)}</dd>
                            <dt>"Recovery reason"</dt><dd>{or_dash(d.recovery_reason)}</dd>
                            <dt>"Replay policy"</dt><dd>{d.replay_policy}</dd>
                            <dt>"Terminal at"</dt><dd>{or_dash(d.terminal_at)}</dd>
                            {d.drill.map(|drill| view! { <dt>"Drill"</dt><dd><a href=format!("/drills/{drill}")>{drill.clone()}</a></dd> })}
                            {d.trace_url.map(|url| view! { <dt>"Trace"</dt><dd><a class="trace-link" href=url rel="noopener noreferrer" target="_blank">"Open the job's trace"</a></dd> })}
                            {(!d.incidents.is_empty()).then(|| view! {
                                <dt>"Incidents"</dt>
                                <dd class="incidents">{d.incidents.iter().map(|i| view! {
                                    <span><a href=format!("/incidents/{}", i.incident_id)>{format!("#{} {}", i.incident_id, i.title)}</a>
                                    {if i.open { " (open: kept from retention)" } else { " (closed)" }}" "</span>
                                }).collect_view()}</dd>
                            })}
                        </dl>
                        <p class="exports">
                            "Export for incident review: "
                            <a href=format!("/jobs/{}/export.md", d.job_id)>"Markdown"</a>" · "
                            <a href=format!("/jobs/{}/export.json", d.job_id)>"JSON"</a>
                        </p>
                        {(visitor.can_act() && !d.pin_to.is_empty()).then(|| view! {
                            <form method="post" action="/incidents/pin" class="inline pin-to">
                                <input type="hidden" name="csrf" value=visitor.csrf.clone()/>
                                <input type="hidden" name="job_ids" value=d.job_id.clone()/>
                                <input type="hidden" name="back" value="job"/>
                                <label>"Pin to incident "
                                    <select name="incident">
                                        {d.pin_to.iter().map(|i| view! {
                                            <option value=i.incident_id.to_string()>{format!("#{} {}", i.incident_id, i.title)}</option>
                                        }).collect_view()}
                                    </select>
                                </label>
                                <button type="submit">"Pin"</button>
                            </form>
                        })}
                        {(!d.reruns.is_empty()).then(|| view! {
                            <p class="reruns">
                                {d.reruns.iter().map(|(dir, id)| view! {
                                    <span>{if dir == "to" { "Run again as " } else { "A re-run of " }}
                                        <a class="mono" href=format!("/jobs/{id}")>{id.clone()}</a>". "</span>
                                }).collect_view()}
                            </p>
                        })}
                        {(d.terminal && visitor.can_act()).then(|| view! {
                            <details class="rerun">
                                <summary>"Run again as a new job…"</summary>
                                <form method="post" action=format!("/jobs/{}/rerun", d.job_id) class="stack">
                                    <p class="muted">"This job stays as it is (terminal states are final). A new job gets the same input, model, attempt budget and deadline length, a new id and a key derived from this one's; both timelines link to each other. It calls the model again."</p>
                                    <input type="hidden" name="csrf" value=visitor.csrf.clone()/>
                                    <input type="hidden" name="seen" value=d.event_count/>
                                    <label>"Reason"<textarea name="reason" required=true maxlength=REASON_MAXLENGTH rows="2"></textarea></label>
                                    <button type="submit">"Run again"</button>
                                </form>
                            </details>
                        })}
                        {(cancelling && !cancel_form).then(|| view! {
                            <p class="cancel"><a href=format!("/jobs/{}?act=cancel#cancel", d.job_id)>"Cancel this job…"</a></p>
                        })}
                        {(cancelling && cancel_form).then(|| view! {
                            <details class="cancel" id="cancel" open=true>
                                <summary>"Cancel this job"</summary>
                                <form method="post" action=format!("/jobs/{}/cancel", d.job_id) class="stack">
                                    <p class="muted">{format!(
                                        "The job fails for good (error “cancelled”) and moves past epoch {}, so an attempt still running can never commit. Its message is deleted when next received.",
                                        d.epoch
                                    )}</p>
                                    <input type="hidden" name="csrf" value=visitor.csrf.clone()/>
                                    <input type="hidden" name="epoch" value=d.epoch.to_string()/>
                                    <input type="hidden" name="state" value=d.state.clone()/>
                                    <label>"Reason"<textarea name="reason" required=true maxlength=REASON_MAXLENGTH rows="2"></textarea></label>
                                    <button type="submit" class="danger">"Cancel the job"</button>
                                </form>
                            </details>
                        })}
                    </header>
                    {deciding.then(|| view! {
                        <DecisionForms job_id=d.job_id.clone() epoch=d.epoch csrf=visitor.csrf.clone() at_risk=d.spend.at_risk.clone()/>
                    })}
                    <section aria-labelledby="swimlanes">
                        <h2 id="swimlanes">"Timeline"</h2>
                        <div class="swimlane"><SvgChart chart=d.swimlane/></div>
                        <ZoomForm job_id=d.job_id.clone() zoom/>
                    </section>
                    <section aria-labelledby="events">
                        <h2 id="events">{format!("Events ({})", d.event_count)}</h2>
                        <EventTable job_id=d.job_id.clone() timeline/>
                    </section>
                    <section aria-labelledby="attempts">
                        <h2 id="attempts">"Attempts"</h2>
                        <table class="stack-narrow">
                            <thead><tr>
                                <th scope="col">"#"</th><th scope="col">"Epoch"</th><th scope="col">"Worker"</th>
                                <th scope="col">"Provider"</th><th scope="col">"Request id"</th><th scope="col">"Started"</th>
                                <th scope="col">"Took"</th><th scope="col">"Tokens"</th><th scope="col">"Cost"</th><th scope="col">"Outcome"</th><th scope="col">"Error"</th>
                                <th scope="col">"Timeline"</th>
                            </tr></thead>
                            <tbody>
                                {d.attempts.into_iter().map(|a| view! {
                                    <tr class:accepted=a.accepted>
                                        <td data-label="#" class="num">{a.attempt_no}</td>
                                        <td data-label="Epoch" class="num">{a.epoch}</td>
                                        <td data-label="Worker">{a.worker}</td>
                                        <td data-label="Provider">{a.provider}</td>
                                        <td data-label="Request id" class="mono">{or_dash(a.provider_request_id)}
                                            {a.submitted_id.map(|id| view! { <br/><span class="muted" title="The id the provider runs this attempt under in the background: a new owner polls it instead of running the model again">"runs as "{id}</span> })}</td>
                                        <td data-label="Started">{a.started}</td>
                                        <td data-label="Took">{or_dash(a.duration)}</td>
                                        <td data-label="Tokens" class="num">{or_dash(a.tokens)}</td>
                                        <td data-label="Cost" class="num">{or_dash(a.cost)}</td>
                                        <td data-label="Outcome"><span class=format!("outcome outcome-{}", a.outcome)>{a.outcome.replace('_', " ")}</span>
                                            {a.accepted.then_some(" (accepted)")}
                                            {a.after.map(|after| view! { <br/><span class="muted attempt-after">{after}</span> })}</td>
                                        <td data-label="Error">{or_dash(a.error_code)}</td>
                                        <td data-label="Timeline">
                                            <a href=format!("/jobs/{}?from={}&to={}#swimlanes", d.job_id, a.zoom.from_ms, a.zoom.to_ms)>
                                                {format!("Zoom on attempt {}", a.attempt_no)}
                                            </a>
                                            {a.trace_url.map(|url| view! { <br/><a class="trace-link" href=url rel="noopener noreferrer" target="_blank">{format!("Trace of attempt {}", a.attempt_no)}</a> })}
                                        </td>
                                    </tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                    </section>
                    <section aria-labelledby="decisions">
                        <h2 id="decisions">"Decisions"</h2>
                        {if d.decisions.is_empty() {
                            view! { <p class="empty">"No decision was recorded for this job."</p> }.into_any()
                        } else {
                            view! {
                                <table class="stack-narrow">
                                    <thead><tr>
                                        <th scope="col">"At"</th><th scope="col">"By"</th><th scope="col">"Decision"</th>
                                        <th scope="col">"Saw epoch"</th><th scope="col">"New epoch"</th>
                                        <th scope="col">"To"</th><th scope="col">"Reason"</th><th scope="col">"Evidence"</th>
                                    </tr></thead>
                                    <tbody>
                                        {d.decisions.into_iter().map(|x| view! {
                                            <tr>
                                                <td data-label="At">{x.at}</td><td data-label="By">{x.actor}</td><td data-label="Decision">{x.decision.replace('_', " ")}</td>
                                                <td data-label="Saw epoch" class="num">{x.seen_epoch}</td><td data-label="New epoch" class="num">{x.new_epoch}</td>
                                                <td data-label="To"><StateBadge state=x.to_state/></td><td data-label="Reason">{x.reason}</td>
                                                <td data-label="Evidence" class="evidence">{match x.evidence {
                                                    Some(evidence) => view! { <code>{evidence}</code> }.into_any(),
                                                    None => view! { <span class="muted">"—"</span> }.into_any(),
                                                }}</td>
                                            </tr>
                                        }).collect_view()}
                                    </tbody>
                                </table>
                            }.into_any()
                        }}
                    </section>
                }
                .into_any()
            })}
        </Suspense>
    }
    .into_any()
}

#[component]
fn EventTable(job_id: String, timeline: Timeline) -> impl IntoView {
    let base = format!("/jobs/{job_id}");
    let pager = {
        let base = base.clone();
        let (previous, next) = (timeline.previous, timeline.next);
        move || {
            (previous.is_some() || next.is_some()).then(|| {
                view! {
                    <nav class="pager" aria-label="Event pages">
                        {previous.map(|p| view! { <a href=format!("{base}?after={p}#events")>"← Earlier events"</a> })}
                        {next.map(|n| view! { <a rel="next" href=format!("{base}?after={n}#events")>"Later events →"</a> })}
                        <form method="get" action=base.clone() class="jump">
                            <label>"Go to event " <input type="number" name="around" min="1" size="6"/></label>
                            <button type="submit">"Go"</button>
                        </form>
                    </nav>
                }
            })
        }
    };
    view! {
        {pager()}
        <table class="events stack-narrow">
            <thead><tr>
                <th scope="col">"#"</th><th scope="col">{format!("Time ({})", super::visitor().zone)}</th><th scope="col">"+"</th>
                <th scope="col">"Kind"</th><th scope="col">"Epoch"</th><th scope="col">"Actor"</th>
                <th scope="col">"Delivery"</th><th scope="col">"Attempt"</th>
                <th scope="col">"Deadline left"</th><th scope="col">"Detail"</th>
            </tr></thead>
            <tbody>
                {timeline.rows.into_iter().map(|row| match row {
                    TimelineRow::Event(e) => view! {
                        <tr id=format!("e{}", e.seq) class=format!("kind-{}", e.kind)>
                            <td data-label="#" class="num"><a href=format!("#e{}", e.seq) title="Permalink to this event">{e.seq}</a></td>
                            <td data-label="Time">{e.at}</td>
                            <td data-label="+" class="num narrow-hide">{e.offset}</td>
                            <td data-label="Kind">{e.kind.replace('_', " ")}</td>
                            <td data-label="Epoch" class="num">{e.epoch}</td>
                            <td data-label="Actor">{e.actor}</td>
                            <td data-label="Delivery" class="mono">{or_dash(e.delivery)}</td>
                            <td data-label="Attempt" class="num narrow-hide">{e.attempt_no.map(|a| a.to_string()).unwrap_or_default()}</td>
                            <td data-label="Deadline left" class="num">{or_dash(e.deadline_left)}</td>
                            <td data-label="Detail" class="detail mono">{e.detail}</td>
                        </tr>
                    }.into_any(),
                    TimelineRow::Folded { kind, first_seq, last_seq, first_at, last_at, refusals } => {
                        let count = last_seq - first_seq + 1;
                        let anchors = (first_seq + 1..=last_seq)
                            .map(|s| view! { <i id=format!("e{s}")></i> })
                            .collect_view();
                        view! {
                            <tr id=format!("e{first_seq}") class="folded">
                                <td class="num">{format!("{first_seq}–{last_seq}")}{anchors}</td>
                                <td colspan="2">{format!("{first_at} → {last_at}")}</td>
                                <td colspan="6">{match (kind.as_str(), refusals) {
                                    ("renewed", _) => format!("{count} × lease and visibility renewed, all answered"),
                                    ("throttled", Some(n)) => format!(
                                        "throttled ×{n}, until {last_at}: {} never ran (refused by the provider, \
                                         or held back for its limit), so no attempt of the budget was spent \
                                         ({count} events: claims, refusals, waits, sends and receives)",
                                        if n == 1 { "the attempt" } else { "the attempts" },
                                    ),
                                    _ => format!("{count} × {}", kind.replace('_', " ")),
                                }}</td>
                                <td><a href=format!("{base}?open={first_seq}#e{first_seq}")>"Show them"</a></td>
                            </tr>
                        }.into_any()
                    }
                }).collect_view()}
            </tbody>
        </table>
        {pager()}
    }
}

/// The three decisions an `unknown` job can get, each a plain form naming the epoch shown.
#[component]
fn DecisionForms(
    job_id: String,
    epoch: i64,
    csrf: String,
    at_risk: Option<String>,
) -> impl IntoView {
    let action = format!("/jobs/{job_id}/decisions");
    let hidden = move |decision: &'static str| {
        view! {
            <input type="hidden" name="csrf" value=csrf.clone()/>
            <input type="hidden" name="epoch" value=epoch.to_string()/>
            <input type="hidden" name="decision" value=decision/>
        }
    };
    view! {
        <section aria-labelledby="decide" class="decide">
            <h2 id="decide">"Decide"</h2>
            <p class="lead">
                {format!("You are deciding at epoch {epoch}. If the job changes before you submit, nothing is changed and you are told so. ")}
                "Every decision needs a reason and is recorded with your name."
            </p>
            <div class="decisions">
                <form method="post" action=action.clone() class="stack">
                    <h3>"Authorize a fenced retry"</h3>
                    <p class="muted">"Moves the job to a new epoch, so an earlier attempt still running can never commit, and sends it back to the queue. The attempt budget and the deadline stay as they are."</p>
                    {at_risk.map(|risk| view! { <p class="at-risk">{format!("A retry calls the model again. What the lost attempt may already have cost: {risk}.")}</p> })}
                    {hidden.clone()("authorize_retry")}
                    <label>"Reason"<textarea name="reason" required=true maxlength=REASON_MAXLENGTH rows="2"></textarea></label>
                    <button type="submit">"Authorize retry"</button>
                </form>
                <form method="post" action=action.clone() class="stack">
                    <h3>"Resolve as succeeded"</h3>
                    <p class="muted">"When the provider shows the call completed. The pasted result becomes the job's accepted result."</p>
                    {hidden.clone()("resolve_succeeded")}
                    <label>"Provider reference"<input name="evidence" maxlength=EVIDENCE_MAXLENGTH/></label>
                    <label>"Result (pasted)"<textarea name="result" rows="3" maxlength="1000000"></textarea></label>
                    <label>"Reason"<textarea name="reason" required=true maxlength=REASON_MAXLENGTH rows="2"></textarea></label>
                    <button type="submit">"Resolve as succeeded"</button>
                </form>
                <form method="post" action=action class="stack">
                    <h3>"Resolve as failed"</h3>
                    <p class="muted">"Ends the job for good, without another call."</p>
                    {hidden("resolve_failed")}
                    <label>"Reason"<textarea name="reason" required=true maxlength=REASON_MAXLENGTH rows="2"></textarea></label>
                    <button type="submit" class="danger">"Resolve as failed"</button>
                </form>
            </div>
        </section>
    }
}

/// Reads `?from=&to=` (milliseconds after the job's creation): both or neither, whole
/// numbers, `from` before `to`.
pub fn parse_zoom(from: Option<&str>, to: Option<&str>) -> Result<Option<Zoom>, BadParameter> {
    let number = |name: &str, text: &str| {
        text.trim()
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| {
                BadParameter::new(
                    name,
                    text,
                    "a whole number of milliseconds after the job was created, such as 1500",
                )
            })
    };
    let (from, to) = (
        from.filter(|t| !t.trim().is_empty()),
        to.filter(|t| !t.trim().is_empty()),
    );
    match (from, to) {
        (None, None) => Ok(None),
        (Some(f), None) => Err(BadParameter::new("from", f, "given with `to`")),
        (None, Some(t)) => Err(BadParameter::new("to", t, "given with `from`")),
        (Some(f), Some(t)) => {
            let (from_ms, to_ms) = (number("from", f)?, number("to", t)?);
            if to_ms <= from_ms {
                return Err(BadParameter::new("to", t, "after `from`"));
            }
            Ok(Some(Zoom { from_ms, to_ms }))
        }
    }
}

/// Zooms the swimlane on a stretch of the job's life, without JavaScript: a form of two
/// offsets, and a way back to the whole job.
#[component]
fn ZoomForm(job_id: String, zoom: Option<Zoom>) -> impl IntoView {
    let value = |ms: Option<i64>| ms.map(|v| v.to_string()).unwrap_or_default();
    view! {
        <form method="get" action=format!("/jobs/{job_id}#swimlanes") class="zoom filters">
            <label>"From (ms after creation)"
                <input name="from" type="number" min="0" step="1" value=value(zoom.map(|z| z.from_ms)) required=true/>
            </label>
            <label>"To (ms after creation)"
                <input name="to" type="number" min="1" step="1" value=value(zoom.map(|z| z.to_ms)) required=true/>
            </label>
            <button type="submit">"Zoom"</button>
            {zoom.map(|z| view! {
                <span class="muted">
                    {format!("Showing +{} ms to +{} ms. ", z.from_ms, z.to_ms)}
                    <a href=format!("/jobs/{job_id}#swimlanes")>"Show the whole job"</a>
                </span>
            })}
        </form>
    }
}

#[cfg(test)]
mod zoom_tests {
    use super::*;

    #[test]
    fn zoom_needs_both_ends_in_order() {
        assert_eq!(parse_zoom(None, None), Ok(None));
        assert_eq!(
            parse_zoom(Some("100"), Some("2500")),
            Ok(Some(Zoom {
                from_ms: 100,
                to_ms: 2500
            }))
        );
        assert_eq!(parse_zoom(Some(""), Some("")), Ok(None));
        assert_eq!(parse_zoom(Some("5"), None).unwrap_err().name, "from");
        assert_eq!(parse_zoom(Some("9"), Some("3")).unwrap_err().name, "to");
        assert_eq!(parse_zoom(Some("-1"), Some("3")).unwrap_err().name, "from");
        assert_eq!(
            parse_zoom(Some("1.5s"), Some("3")).unwrap_err().name,
            "from"
        );
    }
}
