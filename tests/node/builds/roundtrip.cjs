// The commercial SDK's own folder-sync and exec clients against a devyard Gradle instance:
// node roundtrip.cjs API_URL TOKEN FOLDER CACHE_DIR  -> one JSON line on stdout.
'use strict';
const fs = require('fs');
const path = require('path');
const { syncFolder } = require('@limrun/api/folder-sync');
const { exec } = require('@limrun/api/exec-client');

const [apiUrl, token, folder, basisCacheDir] = process.argv.slice(2);

async function main() {
  const options = {
    apiUrl,
    token,
    udid: 'devyard-test',
    basisCacheDir,
    install: false,
    watch: false,
    log: () => {},
    ignoreFn: (p) => p.startsWith('build/') || p.endsWith('local.properties'),
  };
  const first = await syncFolder(folder, options);
  const unchanged = await syncFolder(folder, options);
  const big = path.join(folder, 'data.bin');
  const bytes = fs.readFileSync(big);
  bytes.write('changed!', 1000);
  fs.writeFileSync(big, bytes);
  const delta = await syncFolder(folder, options);
  const stdout = [];
  const proc = exec(
    { command: 'run', commandLine: 'sha256sum data.bin; cat greeting.txt; exit 7' },
    { apiUrl, token },
  );
  proc.stdout.on('data', (chunk) => stdout.push(chunk));
  const result = await proc;
  console.log(
    JSON.stringify({
      bytes: [first.bytesSent, unchanged.bytesSent, delta.bytesSent],
      exitCode: result.exitCode,
      status: result.status,
      stdout,
    }),
  );
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : String(err));
  process.exit(1);
});
