// Node 20 has no Promise.withResolvers, which current js-libp2p dependencies call.
// Loaded before anything else (`node --import ./polyfill.mjs peer.mjs`).
if (typeof Promise.withResolvers !== 'function') {
  Object.defineProperty(Promise, 'withResolvers', {
    configurable: true,
    writable: true,
    value: function withResolvers () {
      let resolve
      let reject
      const promise = new this((res, rej) => {
        resolve = res
        reject = rej
      })
      return { promise, resolve, reject }
    }
  })
}
