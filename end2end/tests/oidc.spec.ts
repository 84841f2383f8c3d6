import { test, expect, type Page } from '@playwright/test';

// Sign-in through a real OpenID provider (npm's oidc-provider, started by scripts/e2e.sh with
// its development sign-in pages): `admin-…` names are in the group that maps to admin,
// `acme-…` in the one that maps to operator of tenant acme, anyone else in no known group.
const issuer = process.env.FENCELINE_OIDC_ISSUER ?? '';

test.beforeAll(() => {
  expect(issuer, 'scripts/e2e.sh sets FENCELINE_OIDC_ISSUER').not.toBe('');
});

/** Signs in at the provider's own pages as `login`, and consents when it asks. */
async function atProvider(page: Page, login: string) {
  await expect(page).toHaveURL(new RegExp(`^${issuer}/interaction/`));
  await page.locator('input[name="login"]').fill(login);
  await page.locator('input[name="password"]').fill('any password: the provider is for tests');
  await page.getByRole('button', { name: 'Sign-in' }).click();
  // Next, the provider's consent page, or already the console.
  const consent = page.getByRole('button', { name: 'Continue' });
  await expect(consent.or(page.locator('header.topbar'))).toBeVisible();
  if (await consent.isVisible()) await consent.click();
  await expect(page.locator('header.topbar')).toBeVisible();
}

async function signInThroughProvider(page: Page, login: string, next = '/') {
  await page.goto(`/login?next=${encodeURIComponent(next)}`);
  await page.getByRole('link', { name: 'Sign in with your company account' }).click();
  await atProvider(page, login);
}

test('an operator signs in through the company provider and lands with the role their group maps to', async ({ page }, info) => {
  const admin = `admin-ada-${info.project.name}`;
  await signInThroughProvider(page, admin, '/workers');
  await expect(page).toHaveURL(/\/workers$/);
  await expect(page.locator('.whoami')).toContainText(`${admin} · admin`);
  await expect(page.getByRole('link', { name: 'Operators' })).toBeVisible();
  // The audit names the provider's subject.
  await page.goto('/audit');
  await expect(page.locator('main')).toContainText('signed in oidc');
  await expect(page.locator('main')).toContainText(`oidc:${issuer}|${admin}`);
  await page.getByRole('button', { name: 'Sign out' }).click();

  // Someone else at this browser: the provider's own session goes too.
  await page.context().clearCookies();
  const operator = `acme-ana-${info.project.name}`;
  await signInThroughProvider(page, operator);
  await expect(page.locator('.whoami')).toContainText(`${operator} · operator`);
  await expect(page.locator('.whoami span[title="tenants: acme"]')).toBeVisible();
  await expect(page.getByRole('link', { name: 'Operators' })).toHaveCount(0);
});

test('someone in no group Fenceline knows is refused', async ({ page }, info) => {
  await signInThroughProvider(page, `stranger-sam-${info.project.name}`);
  await expect(page).toHaveURL(/\/login\?/);
  await expect(page.locator('.flash')).toContainText('None of your groups at the identity provider gives a role');
  await page.goto('/jobs');
  await expect(page).toHaveURL(/\/login\?next=/);
});

test('an ID token carrying another sign-in\'s nonce is refused', async ({ page }, info) => {
  // Two sign-ins begun in this browser: the second one's cookie is the one kept.
  const first = await page.request.get('/login/oidc?next=/', { maxRedirects: 0 });
  const second = await page.request.get('/login/oidc?next=/', { maxRedirects: 0 });
  const stale = new URL(first.headers()['location']);
  const current = new URL(second.headers()['location']);
  expect(stale.searchParams.get('nonce')).not.toBe(current.searchParams.get('nonce'));
  // The first sign-in's request, its state and PKCE challenge swapped for the second's: the
  // provider's answer matches the kept sign-in in every way but the token's nonce.
  stale.searchParams.set('state', current.searchParams.get('state') ?? '');
  stale.searchParams.set('code_challenge', current.searchParams.get('code_challenge') ?? '');
  await page.goto(stale.toString());
  await atProvider(page, `admin-replay-${info.project.name}`);
  await expect(page).toHaveURL(/\/login\?next=%2F&said=sso-failed$/);
  await expect(page.locator('.flash')).toContainText("could not be verified");
  await page.goto('/');
  await expect(page).toHaveURL(/\/login\?next=/);
});
