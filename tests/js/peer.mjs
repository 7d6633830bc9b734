// A druse peer written against js-libp2p, for the interop test (tests/tests/interop.rs).
//
// It joins a swarm of real druse nodes over TCP + noise + yamux and gossipsub, and:
// - opens every druse envelope it receives with its own code: DAG-CBOR decoding by
//   @ipld/dag-cbor and Ed25519 verification by @noble/curves over the domain-separated
//   message `"druse/v1/" ‖ kind ‖ 0x00 ‖ body`, then reports what it found on stdout;
// - speaks gossipsub the way druse nodes do: anonymous (the StrictNoSign policy), with message
//   ids derived from the topic and the data, because the envelope inside carries the one
//   signature that matters;
// - on command, signs and publishes a crystal listing with its own key, and publishes
//   forged weather that a druse node must refuse.
//
// Usage: node --import ./polyfill.mjs peer.mjs --seed HEX32 --bootstrap MULTIADDR [--bootstrap ...]
// Stdout: one JSON object per line (`event` names it). Stdin: one JSON command per line
// (`{"cmd":"publish_skill","name":...}`, `{"cmd":"forge_weather","how":...}`, `{"cmd":"stop"}`).

import './polyfill.mjs'
import { createHash } from 'node:crypto'
import { createInterface } from 'node:readline'
import { createLibp2p } from 'libp2p'
import { tcp } from '@libp2p/tcp'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { identify } from '@libp2p/identify'
import { gossipsub } from '@chainsafe/libp2p-gossipsub'
import { generateKeyPairFromSeed, publicKeyFromRaw } from '@libp2p/crypto/keys'
import { multiaddr } from '@multiformats/multiaddr'
import * as dagCbor from '@ipld/dag-cbor'
import { ed25519 } from '@noble/curves/ed25519.js'
import { CID } from 'multiformats/cid'
import { sha256 } from 'multiformats/hashes/sha2'

const DOMAIN = 'druse/v1/'
const TOPICS = {
  crystal: 'druse/crystals/1',
  endorsement: 'druse/endorsements/1',
  weather: 'druse/weather/1',
  bounty: 'druse/bounties/1',
  report: 'druse/reports/1',
  ban: 'druse/trust/1',
  attest: 'druse/trust/1'
}
const ALL_TOPICS = [...new Set(Object.values(TOPICS))]
// Bounds on every wait and loop of this script.
const PUBLISH_TRIES = 100
const PUBLISH_RETRY_MS = 100
const LIFETIME_MS = 5 * 60 * 1000

const enc = new TextEncoder()

function emit (event, fields = {}) {
  process.stdout.write(JSON.stringify({ event, ...fields }, jsonSafe) + '\n')
}

function jsonSafe (_key, value) {
  if (typeof value === 'bigint') return value.toString()
  if (value instanceof Uint8Array) return hex(value)
  if (value instanceof CID) return value.toString()
  return value
}

function hex (bytes) {
  return Buffer.from(bytes).toString('hex')
}

function fromHex (text) {
  if (!/^([0-9a-f]{2})+$/.test(text)) throw new Error(`not lowercase hex: ${text}`)
  return Uint8Array.from(Buffer.from(text, 'hex'))
}

function concat (...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0))
  let at = 0
  for (const p of parts) {
    out.set(p, at)
    at += p.length
  }
  return out
}

function equal (a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i])
}

/** The bytes a druse signature covers. */
function signedMessage (kind, body) {
  return concat(enc.encode(DOMAIN), enc.encode(kind), Uint8Array.of(0), body)
}

/** The druse content id of a body: CIDv1, dag-cbor codec, sha2-256, base32. */
async function contentId (body) {
  return CID.create(1, dagCbor.code, await sha256.digest(body)).toString()
}

/** The gossipsub message id druse nodes use: sha256(topic ‖ 0x00 ‖ data). */
function messageId (msg) {
  return new Uint8Array(createHash('sha256').update(enc.encode(msg.topic)).update(Uint8Array.of(0)).update(msg.data).digest())
}

/** Signs `body` (a JS object) as `kind` with `secret`, as a druse envelope's wire bytes. */
function seal (secret, kind, body, { signer, corrupt } = {}) {
  const bodyBytes = dagCbor.encode(body)
  const sig = ed25519.sign(signedMessage(kind, bodyBytes), secret)
  if (corrupt) sig[0] ^= 0x01
  const envelope = { v: 1, kind, body: bodyBytes, signer: signer ?? ed25519.getPublicKey(secret), sig }
  return { bytes: dagCbor.encode(envelope), bodyBytes }
}

/** Opens an envelope with this script's own code; reports every check it made. */
async function open (topic, data) {
  const report = { topic, envelope_canonical: false, kind_matches_topic: false, signature_valid: false }
  const envelope = dagCbor.decode(data)
  report.envelope_canonical = equal(dagCbor.encode(envelope), data)
  const { v, kind, body, signer, sig } = envelope
  const keys = Object.keys(envelope).sort().join(',')
  if (keys !== 'body,kind,sig,signer,v' || v !== 1 || typeof kind !== 'string') {
    return { ...report, error: `not a druse v1 envelope (fields ${keys}, v ${v})` }
  }
  if (!(body instanceof Uint8Array && signer instanceof Uint8Array && sig instanceof Uint8Array)) {
    return { ...report, error: 'body, signer and sig must be byte strings' }
  }
  report.kind = kind
  report.signer = hex(signer)
  // The envelope's author as a PeerId: druse gossip is anonymous, so this is who wrote it.
  if (signer.length === 32) report.signer_peer = publicKeyFromRaw(signer).toString()
  report.kind_matches_topic = TOPICS[kind] === topic
  const message = signedMessage(kind, body)
  report.signature_valid = signer.length === 32 && sig.length === 64 &&
    ed25519.verify(sig, message, signer, { zip215: false })
  // The same check must fail on a copy with one flipped bit, or it proves nothing.
  const flipped = Uint8Array.from(sig)
  flipped[63] ^= 0x40
  report.flipped_signature_refused = !ed25519.verify(flipped, message, signer, { zip215: false })
  const other = signedMessage(kind === 'weather' ? 'endorsement' : 'weather', body)
  report.other_kind_refused = !ed25519.verify(sig, other, signer, { zip215: false })
  report.content_id = await contentId(body)
  report.body = dagCbor.decode(body)
  return report
}

function option (name) {
  const values = []
  const args = process.argv.slice(2)
  for (let i = 0; i < args.length; i++) {
    if (args[i] === `--${name}` && i + 1 < args.length) values.push(args[++i])
  }
  return values
}

async function publishWhenSubscribed (node, topic, bytes) {
  let last = ''
  for (let i = 0; i < PUBLISH_TRIES; i++) {
    try {
      const { recipients } = await node.services.pubsub.publish(topic, bytes)
      if (recipients.length > 0) return recipients.map(String)
      last = 'no recipients'
    } catch (error) {
      last = String(error?.message ?? error)
    }
    await new Promise(resolve => setTimeout(resolve, PUBLISH_RETRY_MS))
  }
  throw new Error(`no peer took the message on ${topic}: ${last}`)
}

async function main () {
  const [seedHex] = option('seed')
  if (seedHex === undefined) throw new Error('--seed HEX32 is required')
  const seed = fromHex(seedHex)
  const bootstrap = option('bootstrap').map(a => multiaddr(a))
  const privateKey = await generateKeyPairFromSeed('Ed25519', seed)
  const publicKey = ed25519.getPublicKey(seed)
  // The libp2p identity and the envelope signer are one key, as on a druse node: a listing's
  // author is the PeerId of its envelope's signer.
  const keyAgrees = equal(privateKey.publicKey.raw, publicKey)

  const node = await createLibp2p({
    privateKey,
    addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] },
    transports: [tcp()],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    services: {
      identify: identify(),
      pubsub: gossipsub({
        msgIdFn: messageId,
        // Druse nodes publish anonymously (no author, seqno or signature: the envelope is
        // signed), and StrictSign, which requires all three, would refuse their messages.
        // StrictNoSign publishes the same way and takes only such messages; druse nodes take
        // both.
        globalSignaturePolicy: 'StrictNoSign',
        allowPublishToZeroTopicPeers: false,
        emitSelf: false,
        heartbeatInterval: 100,
        fallbackToFloodsub: false
      })
    }
  })

  const pubsub = node.services.pubsub
  for (const topic of ALL_TOPICS) pubsub.subscribe(topic)
  node.addEventListener('peer:connect', evt => emit('connected', { peer: evt.detail.toString() }))
  node.addEventListener('peer:disconnect', evt => emit('disconnected', { peer: evt.detail.toString() }))
  pubsub.addEventListener('subscription-change', evt => {
    for (const s of evt.detail.subscriptions) {
      if (s.subscribe) emit('subscribed', { peer: evt.detail.peerId.toString(), topic: s.topic })
    }
  })
  pubsub.addEventListener('message', evt => {
    const msg = evt.detail
    // The gossipsub author: null for the unsigned messages StrictNoSign takes (the envelope's
    // author is `signer` and `signer_peer`).
    const from = msg.type === 'signed' ? msg.from.toString() : null
    const gossip = msg.type
    open(msg.topic, msg.data)
      .then(report => emit('message', { from, gossip, ...report }))
      .catch(error => emit('message', { from, gossip, topic: msg.topic, error: String(error?.message ?? error) }))
  })

  await node.start()
  for (const addr of bootstrap) {
    try {
      await node.dial(addr, { signal: AbortSignal.timeout(15000) })
    } catch (error) {
      emit('error', { detail: `dialling ${addr}: ${error?.message ?? error}` })
    }
  }
  emit('ready', {
    peer_id: node.peerId.toString(),
    public_key: hex(publicKey),
    key_agrees: keyAgrees,
    listen: node.getMultiaddrs().map(String)
  })

  let weatherSeq = 1_000_000
  const commands = {
    publish_skill: async ({ name, text }) => {
      const listing = {
        issued_at: Date.now(),
        name,
        text,
        semantic_type: 'skill',
        tags: ['interop', 'js'],
        category: 'testing',
        skill_id: `${name}-id`,
        version: 1,
        previous_version: null,
        // Not integral on purpose: DAG-CBOR writes a whole JS number as an integer, and the
        // field is a float.
        stats: { executions: 4, successes: 3, avg_reward: 0.75 },
        asking_price: 25000
      }
      const { bytes, bodyBytes } = seal(seed, 'crystal', listing)
      const recipients = await publishWhenSubscribed(node, TOPICS.crystal, bytes)
      emit('published', { what: 'skill', content_id: await contentId(bodyBytes), recipients })
    },
    // Weather a druse node must refuse: `untrusted_signer` is signed correctly by this peer's
    // own key, which is on no trust list; `bad_signature` names a trusted key as its signer
    // but carries this peer's signature.
    forge_weather: async ({ how, signer }) => {
      const weather = { issued_at: Date.now(), seq: weatherSeq++, level: 0.95, duration_ms: 600000, reason: `forged: ${how}` }
      let sealed
      if (how === 'untrusted_signer') sealed = seal(seed, 'weather', weather)
      else if (how === 'bad_signature') sealed = seal(seed, 'weather', weather, { signer: fromHex(signer) })
      else throw new Error(`unknown forgery ${how}`)
      const recipients = await publishWhenSubscribed(node, TOPICS.weather, sealed.bytes)
      emit('published', { what: `weather:${how}`, content_id: await contentId(sealed.bodyBytes), recipients })
    }
  }

  const stop = async (why) => {
    emit('stopping', { why })
    await node.stop()
    process.exit(0)
  }
  setTimeout(() => { stop('lifetime over').catch(() => process.exit(1)) }, LIFETIME_MS).unref()

  const lines = createInterface({ input: process.stdin })
  for await (const line of lines) {
    if (line.trim() === '') continue
    let command
    try {
      command = JSON.parse(line)
    } catch (error) {
      emit('error', { detail: `bad command ${line}: ${error.message}` })
      continue
    }
    if (command.cmd === 'stop') break
    const run = commands[command.cmd]
    if (run === undefined) {
      emit('error', { detail: `unknown command ${command.cmd}` })
      continue
    }
    try {
      await run(command)
    } catch (error) {
      emit('error', { detail: `${command.cmd}: ${error?.message ?? error}` })
    }
  }
  await stop('told to stop or stdin closed')
}

main().catch(error => {
  emit('error', { detail: String(error?.stack ?? error) })
  process.exit(1)
})
