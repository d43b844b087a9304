-- wrk script for `../cluster.sh`: every request POSTs a new group message (mentioning the
-- bot, so each one also runs a turn) to /v1/messages in one of SESSIONS chats; the answer is
-- the 202 ack, so the latency is the ack latency. Thread i sends to the i-th port of PORTS
-- (comma-separated, round robin). RUN makes message ids unique across runs. Prints one JSON
-- summary line.
local sessions = tonumber(os.getenv("SESSIONS") or "1000")
-- Each of THREADS threads takes its own block of the sessions, so no two connections post to
-- one session at once (a message would wait for the turn before it).
local threads = tonumber(os.getenv("THREADS") or "1")
local run = os.getenv("RUN") or "0"
local ports = {}
for p in string.gmatch(os.getenv("PORTS") or "", "%d+") do ports[#ports + 1] = p end
local counter = 0
local next_thread = 0
function setup(thread)
  if #ports > 0 then
    thread.addr = wrk.lookup("127.0.0.1", ports[(next_thread % #ports) + 1])[1]
  end
  thread:set("tid", next_thread)
  next_thread = next_thread + 1
end
local block, first = 1, 0
function init(args)
  counter = tid * 100000000
  block = math.max(1, math.floor(sessions / threads))
  first = tid * block
end
function request()
  counter = counter + 1
  local body = '{"channel":"bench","chat_kind":"group","chat_id":"g' .. (first + counter % block) ..
    '","message_id":"r' .. run .. "-" .. counter ..
    '","sender":{"id":"u1","name":"U","is_bot":false},"text":"msg ' .. counter ..
    '","mentioned_bot":true,"timestamp_ms":' .. (os.time() * 1000) .. '}'
  return wrk.format("POST", "/v1/messages", {["Content-Type"] = "application/json"}, body)
end
function done(summary, latency, requests)
  io.write(string.format('JSON {"requests":%d,"non2xx":%d,"timeouts":%d,"seconds":%.3f,"p50_ms":%.3f,"p99_ms":%.3f}\n',
    summary.requests, summary.errors.status, summary.errors.timeout, summary.duration / 1e6,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
