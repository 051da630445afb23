// Drives the node agent's kubelet API the way kube-apiserver does since 1.30: TLS, an HTTP/1.1
// upgrade to SPDY/3.1 offering X-Stream-Protocol-Version values, then streams opened by the
// client with a `streamtype` header (and `port`, `requestid` for port-forward), in the order
// client-go's SPDY executor opens them. Frames and header compression are spdy-transport's.
//
// argv[2]: JSON {addr, path, protocols, mode: "exec"|"portforward", streams (exec: the
// stream types in order), stdin (exec, optional), port and send (portforward)}.
// stdout: JSON {status, protocol, body, streams: {type: text}}.
'use strict'

const tls = require('tls')
const transport = require('spdy-transport')

// A kubelet (moby/spdystream) answers each SYN_STREAM with a SYN_REPLY that has no headers,
// and client-go takes it as it is; spdy-transport, made for HTTP over SPDY, wants a `:status`
// and resets the stream without one. Take such a reply as client-go does.
const { Stream } = require('spdy-transport/lib/spdy-transport/stream')
const handleResponse = Stream.prototype._handleResponse
Stream.prototype._handleResponse = function (frame) {
  if (frame.headers[':status'] === undefined) frame.headers[':status'] = '200'
  return handleResponse.call(this, frame)
}

const req = JSON.parse(process.argv[2])
const [host, port] = req.addr.split(':')
const result = { status: 0, protocol: null, body: '', streams: {} }

function done (code) {
  process.stdout.write(JSON.stringify(result) + '\n')
  process.exit(code)
}
setTimeout(() => { result.timeout = true; done(1) }, 20000)

const socket = tls.connect({ host, port: Number(port), rejectUnauthorized: false }, () => {
  const lines = [
    `POST ${req.path} HTTP/1.1`,
    `Host: ${req.addr}`,
    'Connection: Upgrade',
    'Upgrade: SPDY/3.1',
    ...req.protocols.map((p) => `X-Stream-Protocol-Version: ${p}`),
    'Content-Length: 0',
    '', ''
  ]
  socket.write(lines.join('\r\n'))
})
socket.on('error', (e) => { result.error = String(e); done(1) })

let head = Buffer.alloc(0)
function onHead (chunk) {
  head = Buffer.concat([head, chunk])
  const end = head.indexOf('\r\n\r\n')
  if (end < 0) return
  socket.removeListener('data', onHead)
  const text = head.slice(0, end).toString()
  const rest = head.slice(end + 4)
  result.status = Number(text.split(' ')[1])
  const m = /^x-stream-protocol-version:\s*(.+)$/im.exec(text)
  result.protocol = m ? m[1].trim() : null
  if (result.status !== 101) {
    result.body = rest.toString()
    socket.on('data', (c) => { result.body += c.toString() })
    socket.on('end', () => done(0))
    return
  }
  socket.pause()
  if (rest.length) socket.unshift(rest)
  session()
}
socket.on('data', onHead)

function collect (type, stream, pending) {
  result.streams[type] = ''
  stream.on('data', (c) => { result.streams[type] += c.toString() })
  stream.on('error', (e) => { result.streams[type + '_error'] = String(e) })
  stream.on('end', () => pending.delete(type) && pending.size === 0 && done(0))
}

function session () {
  const conn = transport.connection.create(socket, { protocol: 'spdy', isServer: false })
  conn.start(3.1)
  conn.on('error', () => {})
  const open = (headers) => conn.request({ method: 'POST', path: '/', headers })
  if (req.mode === 'exec') {
    const pending = new Set(req.streams.filter((t) => t !== 'stdin'))
    for (const type of req.streams) {
      const s = open({ streamtype: type })
      if (type === 'stdin') {
        s.end(req.stdin || '')
      } else {
        if (type === 'error') s.end() // the client writes nothing on it
        collect(type, s, pending)
      }
    }
  } else {
    const headers = { port: String(req.port), requestid: '0' }
    const pending = new Set(['error', 'data'])
    const error = open({ ...headers, streamtype: 'error' })
    error.end()
    collect('error', error, pending)
    const data = open({ ...headers, streamtype: 'data' })
    collect('data', data, pending)
    data.write(req.send)
  }
}
