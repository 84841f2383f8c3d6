// graphile-worker (pinned in package.json) beside Fenceline's pipeline benchmark, on the same
// PostgreSQL: no-op jobs at concurrency 16 in one process, timed from the first job added
// (or, pre-inserted, from the runner's start) until the jobs table is empty.
//   node run.js DATABASE_URL JOBS preinserted|live
'use strict';
const { run, makeWorkerUtils, Logger } = require('graphile-worker');
const { Pool } = require('pg');

async function main() {
  const [url, jobsArg, mode] = process.argv.slice(2);
  const jobs = Number(jobsArg);
  if (!url || !jobs || !['preinserted', 'live'].includes(mode)) {
    throw new Error('usage: node run.js DATABASE_URL JOBS preinserted|live');
  }
  const pool = new Pool({ connectionString: url, max: 24 });
  const quiet = new Logger(() => () => {});
  const utils = await makeWorkerUtils({ pgPool: pool, logger: quiet });
  await utils.migrate();
  await pool.query('DELETE FROM graphile_worker._private_jobs');
  // One statement per batch, as a service adding many jobs would.
  const add = async (from, to) =>
    pool.query(
      `SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(
         SELECT ROW('noop', json_build_object('i', g), NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
         FROM generate_series($1::int, $2::int) g))`,
      [from, to],
    );
  const addAll = async (batch) => {
    for (let i = 1; i <= jobs; i += batch) await add(i, Math.min(i + batch - 1, jobs));
  };
  const remaining = async () =>
    Number((await pool.query('SELECT count(*) AS n FROM graphile_worker._private_jobs')).rows[0].n);
  if (mode === 'preinserted') await addAll(1000);
  const started = process.hrtime.bigint();
  const runner = await run({
    pgPool: pool,
    concurrency: 16,
    noHandleSignals: true,
    pollInterval: 1000,
    logger: quiet,
    taskList: { noop: async () => {} },
  });
  if (mode === 'live') await addAll(100);
  while ((await remaining()) > 0) await new Promise((r) => setTimeout(r, 10));
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  await runner.stop();
  await utils.release();
  await pool.end();
  console.log(
    `graphile-worker 0.16.6, ${mode === 'live' ? 'jobs added while workers run' : 'jobs pre-inserted, then drained'}: ` +
      `${jobs} jobs in ${seconds.toFixed(2)} s = ${Math.round(jobs / seconds)} jobs/s`,
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
