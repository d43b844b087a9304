-- wrk script for `../cluster.sh`: every request is a new message to /v1/chat/completions in
-- one of SESSIONS sessions (picked by the OpenAI `user` field); wrk thread i sends to the
-- i-th port of PORTS (comma-separated, round robin), so one wrk spreads its load over every
-- node and sums it. Prints one JSON summary line.
local sessions = tonumber(os.getenv("SESSIONS") or "1000")
-- Each of THREADS threads takes its own block of the sessions, so no two connections post to
-- one session at once (a message would wait for the turn before it).
local threads = tonumber(os.getenv("THREADS") or "1")
local model = os.getenv("MODEL") or "fake-model"
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
  local body = '{"model":"' .. model .. '","user":"s' .. (first + counter % block) ..
    '","messages":[{"role":"user","content":"msg ' .. counter .. '"}]}'
  return wrk.format("POST", "/v1/chat/completions", {["Content-Type"] = "application/json"}, body)
end
function done(summary, latency, requests)
  io.write(string.format('JSON {"requests":%d,"non2xx":%d,"timeouts":%d,"seconds":%.3f,"p50_ms":%.3f,"p99_ms":%.3f}\n',
    summary.requests, summary.errors.status, summary.errors.timeout, summary.duration / 1e6,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
