# Shared by the HTTP load scripts (`http_turns.sh`, `http_profile.sh`, `cluster.sh`); source it.

# Installs wrk and nginx-light with apt-get when missing; sets `nginx_bin`.
need_wrk_and_nginx() {
    local need=()
    command -v wrk >/dev/null || need+=(wrk)
    command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
    if [ ${#need[@]} -gt 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
        # The package starts its own nginx service; the harness runs its own instance.
        (service nginx stop || systemctl stop nginx) >/dev/null 2>&1 || true
    fi
    nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
}

# Starts nginx as an instant OpenAI-compatible model on port $2, working in dir $1; sets
# `nginx_pid`.
start_fake_model() {
    local work=$1 port=$2 here
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    mkdir -p "$work/logs"
    sed "s/FAKE_PORT/$port/" "$here/fake-model.nginx.conf" >"$work/nginx.conf"
    "$nginx_bin" -c "$work/nginx.conf" -p "$work" -g "pid $work/nginx.pid; daemon off;" &
    nginx_pid=$!
}

# Writes to $1 a `turnstile serve` config whose model is the fake model on port $2, with
# durability $3.
write_fake_model_config() {
    cat >"$1" <<TOML
[model]
provider = "openai"
base_url = "http://127.0.0.1:$2/v1"
model = "fake-model"
[storage]
durability = "$3"
TOML
}
