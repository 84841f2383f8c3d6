import { test, expect } from '@playwright/test';

const token = process.env.FENCELINE_E2E_TOKEN ?? '';

test('the console frame renders with its stylesheet and navigation', async ({ page }, info) => {
  const response = await page.goto('/');
  expect(response?.status()).toBe(200);
  await expect(page.getByRole('heading', { level: 1, name: 'Fenceline' })).toBeVisible();
  await expect(page.getByRole('navigation', { name: 'Main' })).toBeVisible();
  // The stylesheet is applied, not just linked.
  const background = await page.evaluate(() => getComputedStyle(document.body).margin);
  expect(background).toBe('0px');
  await page.screenshot({ path: info.outputPath('home.png'), fullPage: true });
});

test('the readiness link reports the embedded ledger', async ({ page }) => {
  await page.goto('/');
  await page.getByRole('link', { name: 'Readiness' }).click();
  await expect(page.locator('body')).toContainText('"ready":true');
  await expect(page.locator('body')).toContainText('"database":"sqlite"');
});

test('a job submitted through the API is readable with its timeline', async ({ request }) => {
  expect(token, 'scripts/e2e.sh sets FENCELINE_E2E_TOKEN').not.toBe('');
  const headers = { Authorization: `Bearer ${token}` };
  const created = await request.post('/api/v1/jobs', {
    headers,
    data: { idempotency_key: `e2e-${test.info().project.name}`, input: { doc: 'hello' } },
  });
  expect(created.status()).toBe(201);
  const job = await created.json();
  const events = await request.get(`/api/v1/jobs/${job.job_id}/events`, { headers });
  const body = await events.json();
  expect(body.events[0].kind).toBe('job_created');
  expect(body.events[0].permalink).toBe(`/jobs/${job.job_id}#e1`);
});

test('an unknown address is a plain 404', async ({ page }) => {
  const response = await page.goto('/no-such-page');
  expect(response?.status()).toBe(404);
});
