import { test, expect, type APIRequestContext, type Locator, type Page } from '@playwright/test';

// Set by scripts/e2e.sh: an API token, and two generated long timelines.
const token = process.env.FENCELINE_E2E_TOKEN ?? '';
const longJob = process.env.FENCELINE_E2E_LONG_JOB ?? '';
const foldedJob = process.env.FENCELINE_E2E_FOLDED_JOB ?? '';
const headers = { Authorization: `Bearer ${token}` };
const secret = 'e2e-secret-input-do-not-show';
// Operators e2e-operator and e2e-viewer share this password; three seeded `unknown` jobs.
const password = process.env.FENCELINE_E2E_PASSWORD ?? '';
const unknownJobs = (process.env.FENCELINE_E2E_UNKNOWN_JOBS ?? '').trim().split(/\s+/);
// Two more `unknown` jobs (tenant e2e-cancel), one per project, to cancel from the jobs list.
const cancelJobs = (process.env.FENCELINE_E2E_CANCEL_JOBS ?? '').trim().split(/\s+/);
// Two more (tenant e2e-resolve), one per project, to resolve as succeeded with evidence.
const resolveJobs = (process.env.FENCELINE_E2E_RESOLVE_JOBS ?? '').trim().split(/\s+/);

async function signIn(page: Page, name: string) {
  if (!page.url().includes('/login')) {
    await page.goto('/login');
  }
  await page.getByLabel('Name').fill(name);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

async function signOut(page: Page) {
  await page.getByRole('button', { name: 'Sign out' }).click();
  await expect(page).toHaveURL(/\/login\?said=signed-out$/);
  await expect(page.locator('.flash')).toHaveText('Signed out.');
}

async function submitAndFinish(request: APIRequestContext, key: string): Promise<string> {
  const created = await request.post('/api/v1/jobs', {
    headers,
    data: { idempotency_key: key, input: { document: secret }, model: { temperature: 0 } },
  });
  expect([200, 201]).toContain(created.status());
  const job = await created.json();
  await expect
    .poll(async () => (await (await request.get(`/api/v1/jobs/${job.job_id}`, { headers })).json()).state, {
      timeout: 30_000,
    })
    .toBe('succeeded');
  return job.job_id as string;
}

test.beforeAll(() => {
  expect(token, 'scripts/e2e.sh sets FENCELINE_E2E_TOKEN').not.toBe('');
  expect(longJob, 'scripts/e2e.sh sets FENCELINE_E2E_LONG_JOB').not.toBe('');
  expect(password, 'scripts/e2e.sh sets FENCELINE_E2E_PASSWORD').not.toBe('');
  expect(unknownJobs.length, 'scripts/e2e.sh seeds FENCELINE_E2E_UNKNOWN_JOBS').toBe(3);
  expect(cancelJobs.length, 'scripts/e2e.sh seeds FENCELINE_E2E_CANCEL_JOBS').toBe(2);
  expect(resolveJobs.length, 'scripts/e2e.sh seeds FENCELINE_E2E_RESOLVE_JOBS').toBe(2);
});

// What the browser refused under the content security policy, per page (with JavaScript on,
// it reports each inline script it would not run).
const refusals = new WeakMap<Page, string[]>();

test.beforeEach(async ({ page }) => {
  const refused: string[] = [];
  refusals.set(page, refused);
  page.on('console', (message) => {
    if (message.text().includes('Content Security Policy')) refused.push(`${page.url()}: ${message.text()}`);
  });
  await signIn(page, 'e2e-operator');
  await expect(page).toHaveURL(/\/$/);
});

test.afterEach(async ({ page }) => {
  expect(refusals.get(page) ?? [], 'scripts or styles refused by the content security policy').toEqual([]);
});

test('a shared link opened signed out goes through sign-in to the job; an operator authorizes a retry and finds it in the audit log', async ({ page }, info) => {
  const jobId = unknownJobs[info.project.name === 'with-js' ? 0 : 1];
  await signOut(page);
  await page.goto(`/jobs/${jobId}#e2`);
  await expect(page).toHaveURL(/\/login\?next=/);
  await page.screenshot({ path: info.outputPath('login.png'), fullPage: true });
  await signIn(page, 'e2e-operator');
  // With JavaScript the link's anchor survives sign-in; without, the page itself does.
  await expect(page).toHaveURL(
    new RegExp(`/jobs/${jobId}${info.project.name === 'with-js' ? '#e2' : ''}$`),
  );
  await expect(page.locator('.job-header .badge')).toHaveText('unknown');
  const decide = page.getByRole('region', { name: 'Decide' });
  await expect(decide).toBeVisible();
  await page.screenshot({ path: info.outputPath('decide.png'), fullPage: true });
  const retry = decide.locator('form', { has: page.getByRole('button', { name: 'Authorize retry' }) });
  await retry.getByLabel('Reason').fill('the provider has no record of the call');
  await retry.getByRole('button', { name: 'Authorize retry' }).click();
  await expect(page.locator('.flash')).toContainText('Retry authorized');
  await expect(page.locator('.job-header .badge')).toHaveText('succeeded', { timeout: 30_000 });
  await expect(page.locator('table.events')).toContainText('decision recorded');
  await page.screenshot({ path: info.outputPath('retried.png'), fullPage: true });
  await page.getByRole('link', { name: 'Audit' }).click();
  const row = page.locator('tbody tr', { hasText: jobId });
  await expect(row).toContainText('operator:e2e-operator');
  await expect(row).toContainText('authorize retry');
  await expect(row).toContainText('the provider has no record of the call');
  await page.screenshot({ path: info.outputPath('audit.png'), fullPage: true });
});

test('an operator resolves an unknown job with the provider\'s reference, and the reference shows wherever the decision does', async ({ page }, info) => {
  const jobId = resolveJobs[info.project.name === 'with-js' ? 0 : 1];
  const reference = `stub-req-abc123-${info.project.name}`;
  await page.goto(`/jobs/${jobId}`);
  const resolve = page
    .getByRole('region', { name: 'Decide' })
    .locator('form', { has: page.getByRole('button', { name: 'Resolve as succeeded' }) });
  await resolve.getByLabel('Provider reference').fill(reference);
  await resolve.getByLabel('Reason').fill('the provider\'s log shows the call completed');
  await resolve.getByRole('button', { name: 'Resolve as succeeded' }).click();
  await expect(page.locator('.flash')).toContainText('Decision recorded');
  await expect(page.locator('.job-header .badge')).toHaveText('succeeded');
  await expect(page.getByRole('region', { name: 'Decisions' })).toContainText(reference);
  await page.screenshot({ path: info.outputPath('resolved.png'), fullPage: true });
  const markdown = await (await page.request.get(`/jobs/${jobId}/export.md`)).text();
  expect(markdown).toContain(`\`${reference}\``);
  const json = await (await page.request.get(`/jobs/${jobId}/export.json`)).json();
  expect(json.decisions[0].evidence).toBe(reference);
  await page.getByRole('link', { name: 'Audit' }).click();
  const row = page.locator('tbody tr', { hasText: jobId });
  await expect(row).toContainText('resolve succeeded');
  await expect(row).toContainText(`Evidence: ${reference}`);
  await page.screenshot({ path: info.outputPath('audit-evidence.png'), fullPage: true });
});

test('a viewer sees an unknown job but no action', async ({ page }, info) => {
  await signOut(page);
  await signIn(page, 'e2e-viewer');
  await page.goto(`/jobs/${unknownJobs[2]}`);
  await expect(page.locator('.job-header .badge')).toHaveText('unknown');
  await expect(page.getByRole('region', { name: 'Decide' })).toHaveCount(0);
  await expect(page.locator('form[action$="/decisions"]')).toHaveCount(0);
  // The swimlane draws the move to `unknown` (epoch 1 → 2) and epoch 2's wait for a decision.
  const wait = page.locator('.swimlane svg g.waiting.unknown');
  await expect(wait).toHaveCount(1);
  await expect(wait.locator('title')).toHaveText(/^epoch 2: unknown from \+.*, waiting for a decision/);
  await expect(page.locator('.swimlane svg .epoch-change title')).toContainText('epoch 1 → 2: recovery claimed');
  await expect(page.locator('.whoami')).toContainText('e2e-viewer');
  await page.screenshot({ path: info.outputPath('viewer.png'), fullPage: true });
});

test('a wrong password is refused with a clear message', async ({ page }) => {
  await signOut(page);
  await page.getByLabel('Name').fill('e2e-viewer');
  await page.getByLabel('Password').fill('not the password at all');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page.locator('.flash')).toHaveText('Wrong name or password.');
});

test('the overview shows jobs by state and charts with their numbers', async ({ page, request }, info) => {
  await submitAndFinish(request, `overview-${info.project.name}`);
  const response = await page.goto('/');
  expect(response?.status()).toBe(200);
  await expect(page.getByRole('heading', { level: 1, name: 'Overview' })).toBeVisible();
  await expect(page.locator('.state-tiles li')).toHaveCount(7);
  // The server's own worker reports: the line under the tiles says so and leads to /workers.
  await expect(page.locator('.workers-line')).toContainText('Workers: 1 alive');
  await expect(page.locator('.workers-line').getByRole('link', { name: 'Workers' })).toHaveAttribute('href', '/workers');
  await expect(page.locator('figure.chart')).toHaveCount(8);
  await expect(page.locator('figure.chart figcaption', { hasText: 'Model spend' })).toHaveCount(1);
  await expect(page.locator('.spend-line')).toContainText('Answers in the last hour cost');
  await expect(page.locator('figure.chart svg').first()).toBeVisible();
  await expect(page.locator('.figures').first()).toContainText('accepted');
  // Each total's key is a stretch of its series' line: the dashed accepted line, dashed.
  const stroke = (l: Locator) =>
    l.evaluate((e) => [getComputedStyle(e).stroke, getComputedStyle(e).strokeDasharray]);
  const first = page.locator('figure.chart').first();
  const [lineStroke, lineDash] = await stroke(first.locator('svg.plot polyline.c-created').first());
  const [keyStroke, keyDash] = await stroke(
    first.locator('.figures div', { hasText: 'accepted' }).locator('svg.swatch line'),
  );
  expect(lineDash).not.toBe('none');
  expect(keyDash).not.toBe('none');
  expect(keyStroke).toBe(lineStroke);
  const [succeededStroke, succeededDash] = await stroke(
    first.locator('.figures div', { hasText: 'succeeded' }).locator('svg.swatch line'),
  );
  expect(succeededDash).toBe('none');
  expect(succeededStroke).toBe(
    (await stroke(first.locator('svg.plot polyline.c-succeeded').first()))[0],
  );
  await page.getByRole('link', { name: 'last day' }).click();
  await expect(page).toHaveURL(/window=day/);
  await page.screenshot({ path: info.outputPath('overview.png'), fullPage: true });
});

test('the jobs list filters by state, finds by key and links to the timeline', async ({ page, request }, info) => {
  const key = `list-${info.project.name}`;
  const jobId = await submitAndFinish(request, key);
  await page.goto('/jobs');
  await expect(page.getByRole('heading', { level: 1, name: 'Jobs' })).toBeVisible();
  await page.getByRole('navigation', { name: 'States' }).getByRole('link', { name: /^succeeded/ }).click();
  await expect(page).toHaveURL(/state=succeeded/);
  await expect(page.locator('table.jobs tbody tr').first()).toContainText('succeeded');
  await page.getByLabel('Job id or idempotency key').fill(key);
  await page.getByRole('button', { name: 'Filter' }).click();
  await expect(page.locator('table.jobs tbody tr')).toHaveCount(1);
  await page.screenshot({ path: info.outputPath('jobs.png'), fullPage: true });
  await page.getByRole('link', { name: jobId }).click();
  await expect(page).toHaveURL(new RegExp(`/jobs/${jobId}$`));
  await expect(page.locator('.job-header .badge')).toHaveText('succeeded');
});

test('a job timeline tells the story and an event permalink highlights its row', async ({ page, request }, info) => {
  const jobId = await submitAndFinish(request, `timeline-${info.project.name}`);
  await page.goto(`/jobs/${jobId}`);
  await expect(page.locator('.swimlane svg')).toBeVisible();
  for (const lane of ['deliveries', 'visibility', 'lease / epoch', 'provider attempts', 'ledger', 'queue']) {
    await expect(page.locator('.swimlane svg')).toContainText(lane);
  }
  const table = page.locator('table.events');
  await expect(table).toContainText('job created');
  await expect(table).toContainText('result accepted');
  await expect(page.locator('body')).not.toContainText(secret);
  await page.locator('#e3 a').first().click();
  await expect(page).toHaveURL(new RegExp(`/jobs/${jobId}#e3$`));
  expect(await page.evaluate(() => document.querySelector(':target')?.id)).toBe('e3');
  await page.screenshot({ path: info.outputPath('job.png'), fullPage: true });
  // The page offers its own address, absolute, to paste into a review.
  const shared = await page.locator('input[name="share"]').inputValue();
  expect(shared).toBe(`${new URL(page.url()).origin}/jobs/${jobId}?tz=UTC`);
  // The same link, pasted into another tab, opens the same view.
  const pasted = await page.context().newPage();
  await pasted.goto(`/jobs/${jobId}#e3`);
  expect(await pasted.evaluate(() => document.querySelector(':target')?.closest('tr')?.id)).toBe('e3');
});

test('a long call folds its renewals, and a folded event keeps its permalink', async ({ page }, info) => {
  await page.goto(`/jobs/${foldedJob}#e500`);
  const folded = page.locator('tr.folded').first();
  await expect(folded).toContainText('lease and visibility renewed');
  expect(await page.evaluate(() => document.querySelector(':target')?.closest('tr')?.classList.contains('folded'))).toBe(true);
  await page.screenshot({ path: info.outputPath('folded.png'), fullPage: false });
  await folded.getByRole('link', { name: 'Show them' }).click();
  await expect(page).toHaveURL(/open=/);
  await expect(page.locator('table.events tbody tr:not(.folded)').nth(50)).toBeVisible();
});

test('a long timeline pages, and any event can be reached without JavaScript', async ({ page }, info) => {
  await page.goto(`/jobs/${longJob}`);
  await expect(page.locator('table.events tbody tr')).toHaveCount(200);
  await page.getByRole('link', { name: 'Later events →' }).first().click();
  await expect(page).toHaveURL(/after=/);
  const first = await page.locator('table.events tbody tr').first().getAttribute('id');
  expect(Number(first?.slice(1))).toBeGreaterThan(200);
  await page.getByLabel('Go to event').first().fill('2500');
  await page.getByRole('button', { name: 'Go' }).first().click();
  await expect(page.locator('#e2500')).toBeVisible();
  await page.screenshot({ path: info.outputPath('long-timeline.png'), fullPage: false });
});

test('with JavaScript, a permalink to an event on a later page opens that page', async ({ page }, info) => {
  test.skip(info.project.name !== 'with-js', 'a progressive enhancement');
  await page.goto(`/jobs/${longJob}#e2900`);
  await expect(page).toHaveURL(/around=2900#e2900$/);
  await expect(page.locator('#e2900')).toBeVisible();
  expect(await page.evaluate(() => document.querySelector(':target')?.id)).toBe('e2900');
});

test('exports for incident review are frozen, complete and free of secrets', async ({ page }, info) => {
  // The signed-in page's cookies: exports are behind sign-in too.
  const request = page.request;
  const jobId = await submitAndFinish(request, `export-${info.project.name}`);
  const md = await request.get(`/jobs/${jobId}/export.md`);
  expect(md.status()).toBe(200);
  const text = await md.text();
  expect(text).toContain(`# Job ${jobId}`);
  expect(text).toContain('Exported ');
  expect(text).toContain('result_accepted');
  expect(text).not.toContain(secret);
  const json = await (await request.get(`/jobs/${jobId}/export.json`)).json();
  expect(json.events.length).toBeGreaterThan(5);
  // Absolute links: they still work once pasted into a document.
  const origin = new URL(page.url()).origin;
  expect(json.events[0].permalink).toBe(`${origin}/jobs/${jobId}#e1`);
  expect(text).toContain(`(${origin}/jobs/${jobId}#e1)`);
  expect(JSON.stringify(json)).not.toContain(secret);
});

test('an operator pins a job to an incident from its page and closes it with a frozen bundle whose digest the page shows', async ({ page }, info) => {
  const request = page.request;
  const jobId = await submitAndFinish(request, `incident-${info.project.name}`);
  const title = `Lost answers (${info.project.name})`;
  await page.goto('/incidents');
  await page.getByText('Open an incident…').click();
  await page.getByLabel('Title').fill(title);
  await page.getByRole('button', { name: 'Open', exact: true }).click();
  await expect(page).toHaveURL(/\/incidents\/\d+$/);
  const id = new URL(page.url()).pathname.split('/').pop();
  await page.goto(`/jobs/${jobId}`);
  await page.getByLabel('Pin to incident').selectOption({ label: `#${id} ${title}` });
  await page.getByRole('button', { name: 'Pin', exact: true }).click();
  await expect(page.locator('.incidents')).toContainText(`#${id} ${title}`);
  await page.goto(`/incidents/${id}`);
  await expect(page.locator('main')).toContainText(jobId);
  await page.getByLabel('Reason').fill('review written');
  await page.getByRole('button', { name: 'Close and freeze' }).click();
  await expect(page.locator('.digest')).toHaveCount(3);
  const shown = await page.locator('.digest').nth(2).textContent();
  const html = await request.get(`/incidents/${id}/bundle.html`);
  expect(html.status()).toBe(200);
  const bytes = await html.body();
  const { createHash } = await import('node:crypto');
  expect(createHash('sha256').update(bytes).digest('hex')).toBe(shown);
  const text = bytes.toString('utf8');
  expect(text).toContain('<svg');
  expect(text).toContain(jobId);
  expect(text).not.toContain(secret);
});

test('the unknown and dead-letter pages render', async ({ page }, info) => {
  await page.goto('/unknown');
  await expect(page.getByRole('heading', { level: 1, name: 'Needs a decision' })).toBeVisible();
  await page.screenshot({ path: info.outputPath('unknown.png'), fullPage: true });
  await page.goto('/dlq');
  await expect(page.getByRole('heading', { level: 1, name: 'Dead letters' })).toBeVisible();
  await expect(page.locator('main')).toContainText('embedded:jobs-dlq');
  await page.screenshot({ path: info.outputPath('dlq.png'), fullPage: true });
});

test('the workers page shows the serving process alive, reached from the main menu', async ({ page }, info) => {
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Workers' }).click();
  await expect(page).toHaveURL(/\/workers$/);
  await expect(page.getByRole('heading', { level: 1, name: 'Workers' })).toBeVisible();
  const row = page.locator('table.workers tbody tr').filter({ hasText: 'embedded:jobs' }).first();
  await expect(row).toContainText('alive');
  await expect(row).toContainText('stub');
  await page.screenshot({ path: info.outputPath('workers.png'), fullPage: true });
});

test('an operator runs the whole drill catalogue from the console, watches it, and follows an evidence link to the event', async ({ page }, info) => {
  test.setTimeout(120_000);
  await page.goto('/drills');
  await expect(page.getByRole('heading', { level: 1, name: 'Redelivery drills' })).toBeVisible();
  await expect(page.locator('table.catalogue')).toContainText('paused-worker-stale-epoch');
  await page.screenshot({ path: info.outputPath('drills.png'), fullPage: true });
  await page.getByRole('button', { name: 'Run drill' }).click();
  await expect(page).toHaveURL(/\/drills\/drl_[0-9a-f]+$/);
  const runUrl = page.url();
  // While it runs the page says so and refreshes itself (a meta refresh: no script needed).
  await expect(page.locator('.job-header .badge').first()).toHaveText(/running|PASS/);
  await expect(page.locator('.job-header .badge').first()).toHaveText(/PASS|FAIL|interrupted/, { timeout: 90_000 });
  if ((await page.locator('.job-header .badge').first().textContent()) !== 'PASS') {
    // Say which check failed, from the report itself.
    const report = await (await page.request.get(`${runUrl}/report.json`)).json();
    const failing = report.scenarios.flatMap((s: any) =>
      s.checks.filter((c: any) => !c.passed).map((c: any) => `${s.kind}: ${c.name} — ${c.detail}`));
    throw new Error(`the drill did not pass: ${failing.join('; ')}`);
  }
  await expect(page.locator('.job-header')).toContainText('14 of 14 scenarios passed');
  await page.screenshot({ path: info.outputPath('drill-report.png'), fullPage: true });
  const evidence = page.locator('#paused-worker-stale-epoch .evidence a').first();
  const href = await evidence.getAttribute('href');
  expect(href).toMatch(/^\/jobs\/job_[0-9a-f-]+#e\d+$/);
  await evidence.click();
  await page.waitForURL((url) => url.pathname + url.hash === href);
  const seq = href!.split('#')[1];
  expect(await page.evaluate(() => document.querySelector(':target')?.closest('tr')?.id ?? document.querySelector(':target')?.id)).toBe(seq);
  await expect(page.locator('.job-header')).toContainText('tenant drill');
  await page.screenshot({ path: info.outputPath('drill-evidence.png'), fullPage: true });
  const markdown = await (await page.request.get(`${runUrl}/report.md`)).text();
  expect(markdown).toContain('— PASS');
  expect(markdown).toMatch(/\(http:\/\/127\.0\.0\.1:\d+\/jobs\/job_[0-9a-f-]+#e\d+\)/);
  expect(markdown).toMatch(/- Took: \d+ ms/);
  // The report is a record: when it started and finished, and how long it took.
  const record = await (await page.request.get(`${runUrl}/report.json`)).json();
  expect(record.started_at).toMatch(/^\d{4}-\d\d-\d\dT/);
  expect(record.finished_at).toMatch(/^\d{4}-\d\d-\d\dT/);
  expect(record.duration_ms).toBeGreaterThan(0);
  // The operators' lists leave the drill's jobs and entries out, one click away.
  const drillJob = href!.split('#')[0];
  await page.goto('/jobs');
  await expect(page.locator('.drills-apart')).toBeVisible();
  await expect(page.locator(`tbody a[href="${drillJob}"]`)).toHaveCount(0);
  await page.locator('.drills-apart a').click();
  await expect(page).toHaveURL(/with_drills=1/);
  await expect(page.locator('tbody a[href^="/jobs/job_"]').first()).toBeVisible();
  await page.goto('/audit');
  await expect(page.locator('tbody tr', { hasText: 'drill started' })).toHaveCount(0);
  await page.locator('.drills-apart a').click();
  await expect(page.locator('tbody tr', { hasText: 'drill started' }).first()).toBeVisible();
});

test('a viewer reads drill reports but cannot start one', async ({ page }, info) => {
  await signOut(page);
  await signIn(page, 'e2e-viewer');
  await page.goto('/drills');
  await expect(page.getByRole('heading', { level: 1, name: 'Redelivery drills' })).toBeVisible();
  await expect(page.getByRole('button', { name: 'Run drill' })).toHaveCount(0);
  await expect(page.locator('main')).toContainText('Running a drill needs the operator or admin role');
  await page.screenshot({ path: info.outputPath('drills-viewer.png'), fullPage: true });
});

test('readiness reports the embedded ledger', async ({ request }) => {
  const ready = await (await request.get('/readyz')).json();
  expect(ready).toEqual({ ready: true, database: 'sqlite' });
});

test('an unknown address is a 404 page in the console, with its menu', async ({ page }) => {
  const response = await page.goto('/no-such-page');
  expect(response?.status()).toBe(404);
  await expect(page.getByRole('heading', { name: 'Not found' })).toBeVisible();
  await expect(page.locator('main code')).toHaveText('/no-such-page');
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Jobs' }).click();
  await expect(page).toHaveURL(/\/jobs$/);
});

test('a burst meets the model\'s rate limit: every job succeeds, refusals fold on its timeline, the provider\'s limit shows', async ({ page, request }, info) => {
  test.setTimeout(120_000);
  const prefix = `burst-${info.project.name}`;
  // A model the workers have not called yet: they learn its limit from this burst.
  const jobs = Array.from({ length: 30 }, (_, i) => ({
    idempotency_key: `${prefix}-${i}`,
    input: { document: `burst ${i}` },
    model: { model: prefix },
    max_attempts: 1,
  }));
  const created = await request.post('/api/v1/jobs/batch', { headers, data: { jobs } });
  expect(created.status()).toBe(200);
  const ids: string[] = (await created.json()).jobs.map((j: any) => j.job.job_id);
  // One attempt each, and a model that admits ten a second: only a refusal that spends
  // nothing lets every job succeed.
  await expect
    .poll(async () => {
      const states = await Promise.all(
        ids.map(async (id) => (await (await request.get(`/api/v1/jobs/${id}`, { headers })).json()).state),
      );
      return states.filter((s) => s === 'succeeded').length;
    }, { timeout: 90_000, intervals: [1000] })
    .toBe(ids.length);
  // A job the model refused before running it.
  let refused = '';
  for (const id of ids) {
    const job = await (await request.get(`/api/v1/jobs/${id}`, { headers })).json();
    if (job.attempts.some((a: any) => a.outcome === 'throttled')) {
      refused = id;
      break;
    }
  }
  expect(refused, 'the burst met the rate limit').not.toBe('');
  await page.goto(`/jobs/${refused}`);
  await expect(page.locator('.facts')).toContainText('1 of 1, and');
  const fold = page.locator('tr.folded').filter({ hasText: 'throttled ×' });
  await expect(fold).toContainText('no attempt of the budget was spent');
  await page.screenshot({ path: info.outputPath('job-throttled.png'), fullPage: true });
  await fold.getByRole('link', { name: 'Show them' }).click();
  await expect(page.locator('td', { hasText: /^throttled$/ }).first()).toBeVisible();
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Workers' }).click();
  const limit = page.locator('table.providers tbody tr').filter({ hasText: prefix });
  await expect(limit).toBeVisible();
  // The rate its answers state (about ten a second), and the limit its refusals named.
  await expect(limit).toContainText(/\d+\.\d\/s/);
  await expect(limit).toContainText('requests');
  await expect(page.locator('table.providers')).toContainText(/admitting|limited until/);
  await page.screenshot({ path: info.outputPath('workers-providers.png'), fullPage: true });
  await page.goto('/');
  await expect(page.getByText('Throttled calls: refused by a provider or held for its limit')).toBeVisible();
  // The burst has drained and the seeded demo jobs finished: no tenant has work in flight.
  await expect(page.getByRole('heading', { name: 'Tenants' })).toBeVisible();
  await expect(page.getByText('No tenant has jobs waiting to be sent or running.')).toBeVisible();
});

test('every page fits the screen from 1400 to 360 px, in light and dark', async ({ page, request }, info) => {
  const jobId = await submitAndFinish(request, `layout-${info.project.name}`);
  const pages: [string, string][] = [
    ['overview', '/'],
    ['overview-week', '/?window=week&tz=America/New_York'],
    ['jobs', '/jobs?key_prefix=layout'],
    ['job', `/jobs/${jobId}`],
    ['unknown-job', `/jobs/${unknownJobs[0]}`],
    ['unknown', '/unknown'],
    ['workers', '/workers'],
    ['dlq', '/dlq'],
    ['drills', '/drills'],
    ['audit', '/audit'],
    ['incidents', '/incidents'],
    ['incident', '/incidents/1'],
    ['api', '/api'],
    ['bad-parameter', '/jobs?state=nope'],
    ['unknown-parameter', '/jobs?limit=abc'],
  ];
  test.setTimeout(180_000);
  for (const width of [1400, 1024, 420, 360]) {
    for (const scheme of ['light', 'dark'] as const) {
      await page.setViewportSize({ width, height: 900 });
      await page.emulateMedia({ colorScheme: scheme });
      for (const [name, path] of pages) {
        await page.goto(path);
        const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        expect(overflow, `${path} at ${width} px (${scheme}) scrolls sideways`).toBeLessThanOrEqual(0);
        // No table scrolls sideways inside its box, or sticks out of the screen.
        const wideTables = await page.evaluate(() =>
          [...document.querySelectorAll('table')]
            .filter((t) => {
              for (let e = t.parentElement; e && e !== document.body; e = e.parentElement) {
                if (e.scrollWidth > e.clientWidth + 1) return true;
              }
              return t.getBoundingClientRect().right > window.innerWidth + 1;
            })
            .map((t) => `table.${t.className}`),
        );
        expect(wideTables, `${path} at ${width} px: tables scrolling sideways`).toEqual([]);
        // Chart text is drawn at 11 px or more on screen.
        const smallText = await page.evaluate(() =>
          [...document.querySelectorAll('svg text')]
            .filter((t) => t.getClientRects().length > 0)
            .map((t) => {
              const scale = (t as SVGTextElement).getScreenCTM()?.a ?? 1;
              return { text: t.textContent, px: parseFloat(getComputedStyle(t).fontSize) * scale };
            })
            .filter((t) => t.px < 10.95)
            .map((t) => `${t.text} (${t.px.toFixed(1)} px)`),
        );
        expect(smallText, `${path} at ${width} px: chart text under 11 px`).toEqual([]);
        await page.screenshot({ path: info.outputPath(`layout-${name}-${width}-${scheme}.png`), fullPage: true });
      }
    }
  }
});

test('a live job page updates itself, in place with JavaScript, by reloading without', async ({ page, request }, info) => {
  const created = await request.post('/api/v1/jobs', {
    headers,
    data: { idempotency_key: `live-${info.project.name}`, input: { document: secret } },
  });
  const job = await created.json();
  await page.goto(`/jobs/${job.job_id}`);
  await expect(page.locator('.refresh')).toContainText('updates itself');
  await page.evaluate(() => { (window as any).stayed = true; });
  await expect(page.locator('.job-header .badge')).toHaveText('succeeded', { timeout: 30_000 });
  // A finished job holds still.
  await expect(page.locator('.refresh')).toHaveCount(0);
  const stayed = await page.evaluate(() => (window as any).stayed === true);
  expect(stayed, 'with JavaScript the page was updated, not reloaded').toBe(info.project.name === 'with-js');
});

test('times are shown in the zone an operator picks, and a shared link keeps it', async ({ page, request }, info) => {
  const jobId = await submitAndFinish(request, `zone-${info.project.name}`);
  await page.goto(`/jobs/${jobId}`);
  await expect(page.locator('.zone summary')).toContainText('UTC');
  await page.locator('.zone summary').click();
  await page.getByLabel('Time zone (IANA name)').fill('Asia/Tokyo');
  await page.getByRole('button', { name: 'Show times in this zone' }).click();
  await expect(page.locator('.flash')).toHaveText('Times are now shown in Asia/Tokyo.');
  await expect(page).toHaveURL(new RegExp(`/jobs/${jobId}$`));
  await expect(page.locator('.job-header')).toContainText('JST');
  await expect(page.locator('input[name="share"]')).toHaveValue(new RegExp(`/jobs/${jobId}\\?tz=Asia%2FTokyo$`));
  // A link that names a zone opens in it, whatever this operator chose.
  await page.goto(`/jobs/${jobId}?tz=Europe/Paris`);
  await expect(page.locator('.job-header')).toContainText('CET');
  await page.screenshot({ path: info.outputPath('job-in-paris.png'), fullPage: true });
});

test('the swimlane zooms on an attempt and back, without JavaScript too', async ({ page, request }, info) => {
  const jobId = await submitAndFinish(request, `zoom-${info.project.name}`);
  await page.goto(`/jobs/${jobId}`);
  await page.getByRole('link', { name: 'Zoom on attempt 1' }).click();
  await expect(page).toHaveURL(/from=\d+&to=\d+/);
  await expect(page.locator('.zoom')).toContainText('Showing +');
  await expect(page.locator('.swimlane svg')).toContainText('provider attempts');
  await page.screenshot({ path: info.outputPath('swimlane-zoomed.png'), fullPage: true });
  await page.getByRole('link', { name: 'Show the whole job' }).click();
  await expect(page).toHaveURL(new RegExp(`/jobs/${jobId}#swimlanes$`));
});

test('the jobs list narrows by key prefix and tenant, and the tabs keep the filters', async ({ page, request }, info) => {
  const jobId = await submitAndFinish(request, `prefix-${info.project.name}-1`);
  await page.goto('/jobs');
  await page.getByLabel('Key starts with').fill(`prefix-${info.project.name}-`);
  await page.getByRole('button', { name: 'Filter' }).click();
  await expect(page).toHaveURL(/key_prefix=prefix-/);
  await expect(page.locator('table.jobs tbody tr')).toHaveCount(1);
  await expect(page.locator('table.jobs tbody tr')).toContainText(jobId);
  await page.getByRole('navigation', { name: 'States' }).getByRole('link', { name: /^succeeded/ }).click();
  await expect(page).toHaveURL(/state=succeeded&key_prefix=prefix-/);
  await expect(page.locator('table.jobs tbody tr')).toHaveCount(1);
});

test('an operator cancels picked jobs from the filtered jobs list, comes back to it, and runs one again', async ({ page }, info) => {
  const jobId = cancelJobs[info.project.name === 'with-js' ? 0 : 1];
  await page.goto('/jobs?tenant=e2e-cancel&state=unknown');
  await page.getByLabel(`Pick ${jobId}`).check();
  await page.getByLabel('Reason').fill('submitted twice by mistake');
  await page.screenshot({ path: info.outputPath('jobs-picked.png'), fullPage: true });
  await page.getByRole('button', { name: 'Cancel picked jobs' }).click();
  await expect(page).toHaveURL(/\/jobs\?tenant=e2e-cancel&state=unknown$/);
  await expect(page.locator('.flash')).toContainText('1 job cancelled: it failed for good at a new epoch');
  await expect(page.getByLabel(`Pick ${jobId}`)).toHaveCount(0);
  await page.goto(`/jobs/${jobId}`);
  await expect(page.locator('.job-header .badge')).toHaveText('failed terminal');
  // Finished now, it can run again from the list as a new job; Enter in the reason picks no action.
  await page.goto('/jobs?tenant=e2e-cancel&state=failed_terminal');
  await page.getByLabel(`Pick ${jobId}`).check();
  await page.getByLabel('Reason').fill('cancelled by mistake');
  await page.getByLabel('Reason').press('Enter');
  await page.waitForLoadState();
  await expect(page.locator('.flash')).toHaveCount(0);
  await expect(page.getByLabel(`Pick ${jobId}`)).toBeChecked();
  await expect(page.getByRole('button', { name: 'Cancel picked jobs' })).toHaveCount(0);
  await page.getByRole('button', { name: 'Run picked jobs again' }).click();
  await expect(page).toHaveURL(/\/jobs\?tenant=e2e-cancel&state=failed_terminal$/);
  await expect(page.locator('.flash')).toContainText('1 job runs again as a new job');
  await page.goto(`/jobs/${jobId}`);
  await expect(page.locator('.job-header .badge')).toHaveText('failed terminal');
  await expect(page.locator('.reruns')).toContainText('Run again as');
});
