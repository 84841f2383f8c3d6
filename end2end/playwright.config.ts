// Playwright drives Debian's Chromium (/usr/bin/chromium) against the real `fenceline` binary,
// started here on a temporary SQLite database prepared by scripts/e2e.sh. Every path runs twice:
// with JavaScript and without, because the console must work without it.
import { defineConfig } from '@playwright/test';

const port = Number(process.env.FENCELINE_E2E_PORT ?? 18089);
const databaseUrl = process.env.FENCELINE_E2E_DATABASE_URL;
const binary = process.env.FENCELINE_BIN ?? '../target/debug/fenceline';
if (!databaseUrl) {
  throw new Error('FENCELINE_E2E_DATABASE_URL is not set: run scripts/e2e.sh');
}

export default defineConfig({
  testDir: './tests',
  outputDir: './test-results',
  reporter: [['list']],
  workers: 1,
  use: {
    baseURL: `http://127.0.0.1:${port}`,
    screenshot: 'on',
    launchOptions: {
      executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
      ],
    },
  },
  projects: [
    { name: 'with-js', use: { javaScriptEnabled: true } },
    { name: 'without-js', use: { javaScriptEnabled: false } },
  ],
  webServer: {
    // Compressed timings and a 1.5 s stub model, so a job's page shows renewals; the model
    // admits ten calls a second, so a burst for a model the workers have not met yet (any
    // model name is allowed) meets its rate limit.
    command: `${binary} serve --bind 127.0.0.1:${port} --database-url '${databaseUrl}' --timings compressed --stub-latency-ms 1500 --stub-rate-limit 10 --allowed-models '*'`,
    url: `http://127.0.0.1:${port}/readyz`,
    reuseExistingServer: false,
    timeout: 120_000,
    stdout: 'pipe',
    stderr: 'pipe',
  },
});
