// A local ATProto network for the agent scenarios: PLC, PDS and AppView (with the bsync and
// ozone services the AppView needs), from @atproto/dev-env, on loopback.
//
// Prints one line `DRUSE_ATPROTO {"pds":…,"appview":…,"plc":…}` once every service answers,
// then runs until it is sent SIGTERM or SIGINT, or its standard input closes (the process
// that started it has gone).
import { TestNetwork } from '@atproto/dev-env'

const started = Date.now()
const schema = process.env.DRUSE_ATPROTO_SCHEMA || "druse"
// dev-env spreads these objects over its own defaults: a key set to undefined would erase
// the port it chose, so a port is only named when one was asked for.
const port = (name) => (process.env[name] ? { port: Number(process.env[name]) } : {})

const network = await TestNetwork.create({
  dbPostgresUrl: process.env.DB_POSTGRES_URL,
  dbPostgresSchema: schema,
  plc: port('DRUSE_ATPROTO_PLC_PORT'),
  pds: { ...port('DRUSE_ATPROTO_PDS_PORT'), hostname: 'localhost', enableDidDocWithSession: true },
  bsky: port('DRUSE_ATPROTO_APPVIEW_PORT'),
})

const urls = {
  plc: network.plc.url,
  pds: network.pds.url,
  appview: network.bsky.url,
  startup_ms: Date.now() - started,
}
console.log(`DRUSE_ATPROTO ${JSON.stringify(urls)}`)

let closing = false
const close = async (why) => {
  if (closing) return
  closing = true
  console.error(`[atproto] closing (${why})`)
  const timer = setTimeout(() => process.exit(1), 10_000)
  try {
    await network.close()
  } catch (err) {
    console.error(`[atproto] close failed: ${err}`)
  }
  clearTimeout(timer)
  process.exit(0)
}
process.on('SIGTERM', () => close('SIGTERM'))
process.on('SIGINT', () => close('SIGINT'))
if (process.env.DRUSE_ATPROTO_DETACHED !== '1') {
  process.stdin.on('end', () => close('stdin closed'))
  process.stdin.on('error', () => close('stdin error'))
  process.stdin.resume()
}
