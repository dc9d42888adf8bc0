// The commercial SDK (@limrun/api, pinned in package.json) driving devyard's device endpoints:
// the Android and iOS instance clients, the ADB tunnel, the multiplexed port tunnel and the
// HTTP proxy helper. Usage: node devices.cjs CONFIG.json (written by tests/e2e/test_sdk_device.py:
// android {apiUrl, token, adbUrl, portPrefix, apkUrl, apkPackage}, ios {apiUrl, token, ipaUrl}).
//
// Prints one JSON line per call {call, ok, value|error}, then the summary JSON line
// {"results": {...}}, then the machine-readable count line:
//   SDK_DEVICE_CALLS passed=<n> failed=<m> total=<n+m>
// A call that is meant to be refused (an unsupported verb, the reverse tunnel) passes when the
// SDK rejects it with devyard's message, never when it hangs. Exits 0 whatever failed: the
// Python test asserts on the results.
'use strict';

const fs = require('fs');
const http = require('http');
const { execFile } = require('child_process');
const { createInstanceClient, Ios, startHttpProxy } = require('@limrun/api');
const { startTcpTunnel } = require('@limrun/api/tunnel');

const CALL_TIMEOUT_MS = 60_000;
const results = {};
let passed = 0;
let failed = 0;

function withTimeout(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out`)), CALL_TIMEOUT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function call(name, fn) {
  try {
    const value = await withTimeout(Promise.resolve().then(fn), name);
    results[name] = { ok: true, value: value === undefined ? null : value };
    passed += 1;
  } catch (err) {
    results[name] = { ok: false, error: String((err && err.message) || err) };
    failed += 1;
  }
  console.log(JSON.stringify({ call: name, ...results[name] }));
  return results[name].ok ? results[name].value : undefined;
}

async function refused(name, fn) {
  // Meant to fail: passes when the SDK rejects (with the message kept), fails if it resolves.
  return call(name, async () => {
    try {
      await fn();
    } catch (err) {
      return { refused: String((err && err.message) || err) };
    }
    throw new Error('expected a refusal, got a result');
  });
}

function adb(args, env) {
  return new Promise((resolve, reject) => {
    execFile('adb', args, { env, timeout: 30_000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`adb ${args.join(' ')}: ${err.message} ${stderr}`));
      else resolve(String(stdout));
    });
  });
}

function get(port, path) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path, agent: false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString() }));
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

function muxRaw(url, token) {
  // Raw frames on one multiplexed socket: junk first (dropped: no id, text), then id 1 answers
  // and is closed by the device, and id 2 on the same socket answers after it.
  const WebSocket = require('ws');
  const header = (id) => { const b = Buffer.alloc(4); b.writeUInt32BE(id); return b; };
  const request = (n) => Buffer.from(`GET /hello?raw=${n} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers: { Authorization: `Bearer ${token}` } });
    const got = { 1: '', 2: '' };
    const closes = [];
    ws.on('error', reject);
    ws.on('open', () => {
      ws.send(Buffer.from([0, 1]));
      ws.send('not a frame');
      ws.send(Buffer.concat([header(1), request(1)]));
    });
    ws.on('message', (data) => {
      const id = data.readUInt32BE(0);
      const payload = data.subarray(4);
      if (payload.length === 0) {
        closes.push(id);
        if (id === 1) ws.send(Buffer.concat([header(2), request(2)]));
        if (id === 2) { ws.close(); resolve({ first: got[1], second: got[2], closes }); }
        return;
      }
      got[id] += payload.toString();
    });
  });
}

function texts(nodes) {
  return nodes.map((n) => n.text || n.contentDesc || '').filter(Boolean);
}

async function android(cfg, appPort) {
  const client = await call('android.connect', async () => {
    const c = await createInstanceClient({
      apiUrl: cfg.apiUrl, token: cfg.token, adbUrl: cfg.adbUrl, logLevel: 'none',
    });
    return c;
  });
  if (!client) return;
  await call('android.screenshot', async () => {
    const { dataUri } = await client.screenshot();
    return { prefix: dataUri.slice(0, 22), length: dataUri.length };
  });
  await call('android.getElementTree', async () => {
    const tree = await client.getElementTree();
    return { xmlStart: tree.xml.slice(0, 5), count: tree.nodes.length, texts: texts(tree.nodes) };
  });
  await call('android.findElement', async () => {
    const found = await client.findElement({ contentDesc: 'Settings' });
    return { count: found.count, bounds: found.elements.map((e) => e.bounds) };
  });
  await call('android.tap', () => client.tap({ selector: { contentDesc: 'Settings' } }));
  await call('android.treeAfterTap', async () => texts((await client.getElementTree()).nodes));
  await call('android.scrollScreen', () => client.scrollScreen('down', 4));
  await call('android.pressKey', () => client.pressKey('HOME'));
  await call('android.setText', () =>
    client.setText({ selector: { className: 'android.widget.EditText' } }, 'hello sdk'));
  await call('android.treeAfterText', async () => texts((await client.getElementTree()).nodes));
  await call('android.openUrl', () => client.openUrl('https://example.com/from-sdk'));
  await call('android.treeAfterOpenUrl', async () => texts((await client.getElementTree()).nodes));
  await call('android.installApp', async () => {
    await client.sendAsset(cfg.apkUrl);
    return { url: cfg.apkUrl };
  });
  await refused('android.startRecording', () => client.startRecording());
  client.keepAlive();

  const adbEnv = { ...process.env };
  const tunnel = await call('android.startAdbTunnel', async () => {
    const t = await client.startAdbTunnel();
    return t;
  });
  if (tunnel) {
    const serial = `${tunnel.address.address}:${tunnel.address.port}`;
    await call('android.adbShell', async () => (await adb(['-s', serial, 'shell', 'echo', 'hi'], adbEnv)).trim());
    await call('android.listApps', async () =>
      (await adb(['-s', serial, 'shell', 'pm', 'list', 'packages'], adbEnv))
        .split('\n').map((l) => l.trim().replace(/^package:/, '')).filter(Boolean));
    await call('android.launchApp', async () => {
      await adb(['-s', serial, 'shell', 'monkey', '-p', cfg.apkPackage, '1'], adbEnv);
      return texts((await client.getElementTree()).nodes);
    });
    await call('android.adbReverse', () =>
      adb(['-s', serial, 'reverse', `tcp:${cfg.devicePort}`, `tcp:${appPort}`], adbEnv));
  }

  const portUrl = `${cfg.portPrefix}${cfg.devicePort}`;
  const mux = await call('android.portTunnel', () =>
    startTcpTunnel(portUrl, cfg.token, '127.0.0.1', 0, { mode: 'multiplexed', logLevel: 'none' }));
  if (mux) {
    await call('android.portTunnelRequests', async () => {
      const answers = await Promise.all(
        [1, 2, 3].map((i) => get(mux.address.port, `/hello?n=${i}`)));
      return answers;
    });
    mux.close();
    await call('android.muxRaw', () => muxRaw(`${portUrl}?mode=multiplexed`, cfg.token));
  }
  const proxy = await call('android.httpProxy', () =>
    startHttpProxy({ remoteBaseUrl: portUrl, headers: { authorization: `Bearer ${cfg.token}` } }));
  if (proxy) {
    await call('android.httpProxyRequest', () => get(proxy.port, '/hello?via=proxy'));
    await proxy.close();
  }
  if (tunnel) tunnel.close();
  client.disconnect();
}

async function ios(cfg) {
  const client = await call('ios.connect', async () => {
    const c = await Ios.createInstanceClient({ apiUrl: cfg.apiUrl, token: cfg.token, logLevel: 'none' });
    return c;
  });
  if (!client) return;
  results['ios.connect'].value = client.deviceInfo;
  await call('ios.screenshot', async () => {
    const shot = await client.screenshot();
    return { width: shot.width, height: shot.height, length: shot.base64.length };
  });
  const tree = await call('ios.elementTree', () => client.elementTree());
  const settings = (tree || []).find((e) => e.AXLabel === 'Settings');
  await call('ios.tap', () => {
    if (!settings) throw new Error('no Settings element in the tree');
    return client.tap(settings.frame.x + settings.frame.width / 2, settings.frame.y + settings.frame.height / 2);
  });
  await call('ios.treeAfterTap', async () => (await client.elementTree()).map((e) => e.AXLabel).filter(Boolean));
  await call('ios.pressKey', () => client.pressKey('home'));
  await call('ios.tapElement', () => client.tapElement({ AXLabel: 'Settings' }));
  await call('ios.pressHome', () => client.pressKey('home'));
  await call('ios.typeText', () => client.typeText('hello ios'));
  await call('ios.treeAfterType', async () => (await client.elementTree()).map((e) => e.AXValue).filter(Boolean));
  await call('ios.openUrl', () => client.openUrl('https://example.com/ios'));
  await call('ios.installApp', () => client.installApp(cfg.ipaUrl));
  await call('ios.listApps', () => client.listApps());
  await call('ios.launchApp', () => client.launchApp(cfg.ipaBundle));
  await call('ios.treeAfterLaunch', async () => (await client.elementTree()).map((e) => e.AXLabel).filter(Boolean));
  await call('ios.terminateApp', () => client.terminateApp(cfg.ipaBundle));
  await call('ios.setOrientation', () => client.setOrientation('Portrait'));
  await call('ios.performActions', () => client.performActions([
    { type: 'wait', durationMs: 10 }, { type: 'tapElement', selector: { AXLabel: 'Settings' } },
  ]));
  await refused('ios.xcrun', () => client.xcrun(['--version']));
  await refused('ios.reverseTunnel', () =>
    client.startReverseTunnel({ remotePort: 57090, localPort: cfg.localPort, logLevel: 'none' }));
  await call('ios.simctl', () => new Promise((resolve, reject) => {
    const run = client.simctl(['list']);
    let stderr = '';
    run.on('stderr', (d) => { stderr += d.toString(); });
    run.on('exit', (code) => resolve({ code, stderr }));
    run.on('error', reject);
  }));
  client.disconnect();
}

async function main() {
  const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const app = http.createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end(`hello from the device ${req.url}`);
  });
  await new Promise((resolve) => app.listen(0, '127.0.0.1', resolve));
  const appPort = app.address().port;
  if (cfg.android) await android({ ...cfg.android, devicePort: cfg.devicePort }, appPort);
  if (cfg.ios) await ios({ ...cfg.ios, localPort: appPort });
  app.close();
  console.log(JSON.stringify({ results }));
  console.log(`SDK_DEVICE_CALLS passed=${passed} failed=${failed} total=${passed + failed}`);
  process.exit(0);
}

main().catch((err) => {
  console.error(err);
  process.exit(2);
});
