// The commercial service's TypeScript SDK (@limrun/api, unmodified) against devyard's control
// plane. Usage: node control_plane.mjs <baseUrl> <apiKey> <workDir>
// Runs every control-plane call, each as a named check, and prints one JSON line:
// {"results": {"<check>": "ok" | "<error>"}}. tests/e2e/test_compat_sdks.py reads it.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import Limrun from '@limrun/api';

const [baseURL, apiKey, workDir] = process.argv.slice(2);
const client = new Limrun({ apiKey, baseURL, maxRetries: 0, timeout: 120_000 });
const results = {};

async function check(name, fn) {
  try {
    await fn();
    results[name] = 'ok';
  } catch (err) {
    results[name] = String(err?.message ?? err).slice(0, 300);
  }
}

function expect(condition, message) {
  if (!condition) throw new Error(`expected: ${message}`);
}

async function collect(iterable) {
  const items = [];
  for await (const item of iterable) items.push(item);
  return items;
}

async function untilCapacity(create) {
  const deadline = Date.now() + 90_000;
  for (;;) {
    try {
      return await create();
    } catch (err) {
      if (err?.status !== 409 || Date.now() > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

const created = {};
const kinds = { android: client.androidInstances, ios: client.iosInstances, xcode: client.xcodeInstances };
const label = `compat-${Date.now()}`;

for (const [kind, resource] of Object.entries(kinds)) {
  await check(`${kind}.create`, async () => {
    const first = await untilCapacity(() =>
      resource.create({ wait: true, metadata: { labels: { suite: label, kind } } }),
    );
    expect(first.metadata.id.startsWith(`${kind}_`), `an ${kind} id, got ${first.metadata.id}`);
    expect(first.status.state === 'ready', `ready, got ${first.status.state}`);
    created[kind] = [first.metadata.id];
  });
  await check(`${kind}.create.reuseIfExists`, async () => {
    const again = await resource.create({
      reuseIfExists: true,
      metadata: { labels: { suite: label, kind } },
    });
    expect(again.metadata.id === created[kind][0], 'the same instance');
  });
  await check(`${kind}.get`, async () => {
    const got = await resource.get(created[kind][0]);
    expect(got.metadata.id === created[kind][0], 'the instance');
    expect(typeof got.status.apiUrl === 'string', 'status.apiUrl');
  });
  if (kind !== 'xcode') {
    // A second one (two instances: the auto-paging below walks two pages of one).
    await check(`${kind}.create.second`, async () => {
      const second = await resource.create({ metadata: { labels: { suite: label, kind, n: '2' } } });
      created[kind].push(second.metadata.id);
    });
  }
  await check(`${kind}.list`, async () => {
    const page = await resource.list({ labelSelector: `suite=${label}` });
    expect(Array.isArray(page.items ?? page.getPaginatedItems()), 'a page of items');
    const ids = page.getPaginatedItems().map((i) => i.metadata.id);
    expect(JSON.stringify(ids) === JSON.stringify(created[kind]), `${created[kind]}, got ${ids}`);
  });
  await check(`${kind}.list.autoPaging`, async () => {
    // limit 1: every instance is a page of its own; the SDK walks until an empty page.
    const all = await collect(resource.list({ labelSelector: `suite=${label}`, limit: 1 }));
    const ids = all.map((i) => i.metadata.id);
    expect(JSON.stringify(ids) === JSON.stringify(created[kind]), `${created[kind]}, got ${ids}`);
  });
  // Deleted before the next kind: `devyard up`'s host has room for four instances.
  await check(`${kind}.delete`, async () => {
    for (const id of created[kind] ?? []) await resource.delete(id);
    const live = await resource.list({ labelSelector: `suite=${label}`, state: 'creating,assigned,ready' });
    expect(live.getPaginatedItems().length === 0, 'none live');
  });
}

await check('gradle.create.get.list.delete', async () => {
  // 0.39.8 has no gradle resource: its generic request methods, as a user would call them.
  const first = await untilCapacity(() =>
    client.post('/v1/gradle_instances', { query: { wait: true }, body: { metadata: { labels: { suite: label } } } }),
  );
  expect(first.metadata.id.startsWith('gradle_'), `a gradle id, got ${first.metadata.id}`);
  const got = await client.get(`/v1/gradle_instances/${first.metadata.id}`);
  expect(got.metadata.id === first.metadata.id, 'the instance');
  const listed = await client.get('/v1/gradle_instances', { query: { labelSelector: `suite=${label}` } });
  expect(Array.isArray(listed) && listed.length === 1, `a bare array of one, got ${JSON.stringify(listed).slice(0, 80)}`);
  await client.delete(`/v1/gradle_instances/${first.metadata.id}`);
});

await check('scopedTokens.create', async () => {
  const token = await client.post('/v1/scoped_tokens', {
    body: { scopes: ['asset:*:read'], ttlSeconds: 900 },
  });
  expect(typeof token.token === 'string' && token.expiresAt, 'a token and its expiry');
});

// Assets
const file = path.join(workDir, 'compat-app.apk');
fs.writeFileSync(file, crypto.randomBytes(4096));
const md5 = crypto.createHash('md5').update(fs.readFileSync(file)).digest('hex');
let assetId;
await check('assets.getOrCreate', async () => {
  const asset = await client.assets.getOrCreate({
    name: `${label}-created.apk`,
    kind: 'App',
    platform: 'android',
    ttl: '24h',
  });
  expect(asset.signedUploadUrl && asset.signedDownloadUrl, 'both signed URLs');
  expect(asset.kind === 'App' && asset.platform === 'android', 'kind and platform echoed');
  await client.assets.delete(asset.id);
});
await check('assets.getOrUpload', async () => {
  const asset = await client.assets.getOrUpload({ path: file, name: `${label}.apk`, platform: 'android' });
  expect(asset.md5 === md5, `md5 ${md5}, got ${asset.md5}`);
  assetId = asset.id;
});
await check('assets.getOrUpload.md5Skip', async () => {
  const before = await client.assets.get(assetId);
  const again = await client.assets.getOrUpload({ path: file, name: `${label}.apk` });
  const after = await client.assets.get(assetId);
  expect(again.id === assetId && again.md5 === md5, 'the same asset and md5');
  expect(before.uploadedAt === after.uploadedAt, 'no second upload');
});
await check('assets.list', async () => {
  const found = await client.assets.list({ nameFilter: `${label}.apk`, includeDownloadUrl: true });
  expect(found.length === 1 && found[0].signedDownloadUrl, 'one asset with its download URL');
  const prefixed = await client.assets.list({ namePrefixFilter: label, limit: 10 });
  expect(prefixed.some((a) => a.id === assetId), 'found by prefix');
});
await check('assets.get', async () => {
  const asset = await client.assets.get(assetId, { includeDownloadUrl: true, includeUploadUrl: true });
  expect(asset.signedDownloadUrl && asset.signedUploadUrl, 'both URLs asked for');
  const bytes = Buffer.from(await (await fetch(asset.signedDownloadUrl)).arrayBuffer());
  expect(crypto.createHash('md5').update(bytes).digest('hex') === md5, 'the uploaded bytes');
});
await check('assets.delete', async () => {
  await client.assets.delete(assetId);
  const left = await client.assets.list({ nameFilter: `${label}.apk` });
  expect(left.length === 0, 'gone');
});

// Analytics: ended instances are billed, so after the deletes.
const from = new Date(Date.now() - 3_600_000).toISOString();
const to = new Date(Date.now() + 3_600_000).toISOString();
await check('analytics.get', async () => {
  const answer = await client.analytics.get({ from, to, bucket: 'hour', timezone: 'Europe/Berlin' });
  expect(answer.timezone === 'Europe/Berlin' && answer.asOf, 'timezone and asOf');
  expect(answer.series.length >= 2 && answer.series[0].timestamp.match(/[+-]0[12]:00$/), 'Berlin hours');
  const count = Object.values(answer.summary.android).reduce((n, s) => n + s.count, 0);
  expect(count >= 2, `the android instances counted, got ${count}`);
});
await check('analytics.getInstances', async () => {
  const answer = await client.analytics.getInstances({ from, to });
  const ids = answer.series.flatMap((s) => s.instances.map((i) => i.instanceTid));
  expect(ids.includes(created.android?.[0]), 'the first android instance');
});

process.stdout.write(JSON.stringify({ results }) + '\n');
