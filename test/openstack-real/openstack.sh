#!/usr/bin/env bash
# Brings up a real OpenStack (Debian 12's packages: the Zed release) on 127.0.0.1 as plain
# processes this script owns — no systemd, no init scripts — runs a command against it, and stops
# everything it started when the command ends, fails or is interrupted.
#
#   test/openstack-real/openstack.sh run -- CMD ARGS...   start, run CMD, stop (exit status of CMD)
#   test/openstack-real/openstack.sh up                   start and wait until interrupted
#
# What runs (docs/openstack-real.md says why each choice):
#   MariaDB (unix socket only), RabbitMQ (127.0.0.1, own epmd port), Keystone and Placement under
#   uwsgi, Glance, Nova (api, conductor, scheduler, compute with compute_driver=fake.FakeDriver),
#   Neutron (ML2 with Neutron's own `test` mechanism driver, which binds ports of the compute host
#   named host-ovs-filter-active without an agent), Cinder (api, scheduler, volume with Cinder's
#   FakeLoggingVolumeDriver: LVM needs device-mapper, which our machines' kernels lack).
#
# CMD gets these variables: OS_AUTH_URL, OS_REGION_NAME, OPENSTACK_REAL_ENV (a file holding every
# variable below), OPENSTACK_REAL_STATE, and the IDs and names of what was seeded:
#   OSR_PROJECT[_ID], OSR_QUOTA_PROJECT[_ID], OSR_USER, OSR_PASSWORD, OSR_DOMAIN,
#   OSR_APPCRED_ID/SECRET, OSR_ADMIN_PASSWORD, OSR_NETWORK_ID, OSR_SUBNET_ID, OSR_SECGROUP,
#   OSR_IMAGE_NAME, OSR_IMAGE_ID, OSR_FLAVOR_SMALL, OSR_FLAVOR_LARGE, OSR_FLAVOR_HUGE,
#   OSR_VOLUME_TYPE, OSR_KEYPAIR, OSR_TOKEN_EXPIRATION, OSR_VERSIONS.
#
# Settings (environment): OPENSTACK_REAL_STATE (state directory; default a new one under /tmp,
# removed at the end unless OPENSTACK_REAL_KEEP=1), OPENSTACK_REAL_PORT_BASE (first of nine
# consecutive loopback ports; default 25300), OPENSTACK_REAL_TOKEN_EXPIRATION (seconds; 600: short
# enough for the token test, long enough for a boot on a busy machine to finish with its token).
# The whole script is one block, so bash reads it before it runs any of it: editing the file while
# a run is going cannot change what that run executes.
{
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
mode=${1:-}
case "$mode" in
run)
	shift
	[ "${1:-}" = "--" ] && shift
	[ $# -gt 0 ] || { echo "usage: $0 run -- CMD ARGS..." >&2; exit 2; }
	;;
up) shift ;;
*)
	echo "usage: $0 run -- CMD ARGS...   |   $0 up" >&2
	exit 2
	;;
esac

log() { printf '>> openstack-real: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root: the services run as root and apt-get installs them"

started=$(date +%s)
"$here/install.sh"

# ------------------------------------------------------------------ state, ports, ownership
port_base=${OPENSTACK_REAL_PORT_BASE:-25300}
token_expiration=${OPENSTACK_REAL_TOKEN_EXPIRATION:-600}
if [ -n "${OPENSTACK_REAL_STATE:-}" ]; then
	state=$OPENSTACK_REAL_STATE
	mkdir -p "$state"
	[ -z "$(ls -A "$state")" ] || die "OPENSTACK_REAL_STATE=$state is not empty: give an empty or new directory"
else
	# No '-' in the path: Cinder's volume path is built from it (see cinder.conf below).
	state=$(mktemp -d /tmp/osreal.XXXXXX)
fi
state=$(cd "$state" && pwd)
case "$state" in *-*) die "OPENSTACK_REAL_STATE must not contain '-' (Cinder escapes it in volume paths): $state" ;; esac

P_KEYSTONE=$((port_base + 0))
P_GLANCE=$((port_base + 1))
P_PLACEMENT=$((port_base + 2))
P_NOVA=$((port_base + 3))
P_NEUTRON=$((port_base + 4))
P_CINDER=$((port_base + 5))
P_RABBIT=$((port_base + 6))
P_EPMD=$((port_base + 7))
P_RABBIT_DIST=$((port_base + 8))
for p in $P_KEYSTONE $P_GLANCE $P_PLACEMENT $P_NOVA $P_NEUTRON $P_CINDER $P_RABBIT $P_EPMD $P_RABBIT_DIST; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		die "port 127.0.0.1:$p is in use: set OPENSTACK_REAL_PORT_BASE to the first of nine free ports"
	fi
done

# Every process started for this run (services, migrations, the command) carries this variable;
# teardown finds them (and the daemons they fork, like epmd) by it, so nothing of this run is left
# and nothing else is touched. The script itself does not carry it.
OWNER="osreal:$state:$$"
owned() { env OPENSTACK_REAL_OWNER="$OWNER" "$@"; }

# owned_pids: the processes of this run. A service is started in a session of its own (setsid;
# its pid file holds the session ID): every process of that session is ours, even those that
# rewrite their environment with their process title (neutron-server's workers). Everything else
# started for the run (migrations, the command, daemons that leave the session like epmd) carries
# OPENSTACK_REAL_OWNER.
owned_pids() {
	local sessions=" " f
	for f in "$state"/run/*.pid; do
		[ -f "$f" ] && sessions+="$(cat "$f") "
	done
	{
		ps -eo pid=,sid= | awk -v s="$sessions" 'index(s, " " $2 " ") { print $1 }'
		# grep exits 2 for the environments it may not read (other users', vanished processes).
		{ grep -lzxF "OPENSTACK_REAL_OWNER=$OWNER" /proc/[0-9]*/environ 2>/dev/null || true; } | cut -d/ -f3
	} | { grep -vxF "$$" || true; } | sort -un
}

# backing_pids: MariaDB, RabbitMQ and every descendant of theirs (RabbitMQ's helpers start
# sessions of their own), which teardown stops after the services.
backing_pids() {
	local sessions=" " f
	for f in mariadb rabbitmq; do
		[ -f "$state/run/$f.pid" ] && sessions+="$(cat "$state/run/$f.pid") "
	done
	ps -eo pid=,ppid=,sid= | awk -v s="$sessions" '
		{ pid[NR] = $1; ppid[NR] = $2; if (index(s, " " $3 " ")) in_set[$1] = 1 }
		END {
			do { grew = 0; for (i = 1; i <= NR; i++) if (!(pid[i] in in_set) && (ppid[i] in in_set)) { in_set[pid[i]] = 1; grew = 1 } } while (grew)
			for (p in in_set) print p
		}'
}

# remove_dev_mapper: the /dev/mapper this run created goes, once empty and no process of
# another run (another OPENSTACK_REAL_OWNER) is left that may be using it.
made_dev_mapper=
remove_dev_mapper() {
	[ -n "$made_dev_mapper" ] || return 0
	local others
	others=$({ grep -lzE "^OPENSTACK_REAL_OWNER=" /proc/[0-9]*/environ 2>/dev/null || true; } |
		{ xargs -r grep -LzxF "OPENSTACK_REAL_OWNER=$OWNER" 2>/dev/null || true; })
	if [ -n "$others" ]; then
		log "another run is using /dev/mapper: left in place"
		return 0
	fi
	rmdir /dev/mapper 2>/dev/null || log "/dev/mapper is no longer empty: left in place"
}

stopped=
teardown() {
	local rc=$?
	[ -z "$stopped" ] || return 0
	stopped=1
	trap '' INT TERM
	# Best effort from here on: a failing check must not end the teardown half-way.
	set +e
	log "stopping OpenStack"
	local pids i backing
	# The OpenStack services first, the database and the message queue once the services have
	# gone, so the services do not log a storm of connection errors on the way out.
	backing=$(backing_pids)
	pids=$(owned_pids | grep -vxF -f <(echo "$backing") || true)
	[ -z "$pids" ] || kill -TERM $pids 2>/dev/null || true
	for i in $(seq 1 100); do
		pids=$(owned_pids | grep -vxF -f <(echo "$backing") || true)
		[ -n "$pids" ] || break
		sleep 0.2
	done
	pids=$(owned_pids)
	[ -z "$pids" ] || kill -TERM $pids 2>/dev/null || true
	for i in $(seq 1 100); do
		pids=$(owned_pids)
		[ -n "$pids" ] || break
		sleep 0.2
	done
	if [ -n "$pids" ]; then
		log "killing what did not stop within 20s: $(echo $pids)"
		kill -KILL $pids 2>/dev/null || true
		for i in $(seq 1 50); do
			pids=$(owned_pids)
			[ -n "$pids" ] || break
			sleep 0.1
		done
	fi
	if [ -n "$pids" ]; then
		log "processes still running after KILL: $(echo $pids)"
		rc=1
	fi
	remove_dev_mapper
	if [ "$rc" -ne 0 ] && [ -d "$state/log" ]; then
		log "logs are in $state/log (kept)"
		OPENSTACK_REAL_KEEP=1
	fi
	if [ "${OPENSTACK_REAL_KEEP:-}" != 1 ] && [ -z "${OPENSTACK_REAL_STATE:-}" ]; then
		rm -rf "$state"
	fi
	exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$state"/{log,run,etc,lib}

# Cinder's fake backend writes a volume made from an image to /dev/mapper/<volume_group>-<name>,
# and volume_group leads from there into the state directory (cinder.conf below). The kernel
# resolves "/dev/mapper/../.." only through an existing /dev/mapper directory, which a machine
# without device-mapper lacks (qemu-img then fails: "Could not create ... No such file or
# directory"). Such a run creates the empty directory and removes it at the end, unless another
# run still uses it.
made_dev_mapper=
if [ ! -d /dev/mapper ]; then
	mkdir /dev/mapper || die "cannot create /dev/mapper, which Cinder's volume path goes through"
	made_dev_mapper=1
	log "created /dev/mapper (no device-mapper here): removed again at the end"
fi
LOG=$state/log
ENVF=$state/env

# start NAME CMD...: runs CMD in the background, its output in $LOG/NAME.log.
start() {
	local name=$1
	shift
	log "starting $name"
	# In a session of its own; the session leader writes its own pid (= the session ID), so the pid
	# file names the session whatever bash forks on the way.
	setsid bash -c 'echo $$ >"$0"; exec "$@"' "$state/run/$name.pid" \
		env OPENSTACK_REAL_OWNER="$OWNER" "$@" >>"$LOG/$name.log" 2>&1 </dev/null &
}

# wait_for WHAT SECONDS CMD...: polls CMD until it succeeds, fails with the log's tail otherwise.
wait_for() {
	local what=$1 secs=$2 logname=$3 i pid
	shift 3
	for i in $(seq 1 $((secs * 5))); do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		pid=$(cat "$state/run/$logname.pid" 2>/dev/null || true)
		if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
			tail -n 40 "$LOG/$logname.log" >&2 || true
			die "$logname exited while waiting for $what"
		fi
		sleep 0.2
	done
	tail -n 40 "$LOG/$logname.log" >&2 || true
	die "$what not ready after ${secs}s"
}

http_up() { curl -sf -o /dev/null "$1"; }

secret() { head -c 18 /dev/urandom | base64 | tr -d '/+='; }
DB_PASS=$(secret)
ADMIN_PASS=$(secret)
SERVICE_PASS=$(secret)
USER_PASS=$(secret)
RABBIT_PASS=guest
SOCK=$state/run/mysql.sock
db_url() { echo "mysql+pymysql://osreal:$DB_PASS@localhost/$1?unix_socket=$SOCK&charset=utf8"; }
TRANSPORT="rabbit://guest:$RABBIT_PASS@127.0.0.1:$P_RABBIT/"
KS=http://127.0.0.1:$P_KEYSTONE
# Region and zone of Gardener's published sample MachineClass, so it runs adapted only in IDs.
REGION=eu-nl-1
ZONE=eu-nl-1b

# ------------------------------------------------------------------ MariaDB (unix socket only)
log "initialising MariaDB in $state/lib/mysql"
owned mariadb-install-db --no-defaults --user=root --datadir="$state/lib/mysql" \
	--auth-root-authentication-method=socket --skip-test-db >"$LOG/mariadb-install.log" 2>&1 ||
	{ tail -n 30 "$LOG/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
start mariadb mariadbd --no-defaults --user=root --datadir="$state/lib/mysql" --socket="$SOCK" \
	--pid-file="$state/lib/mariadbd.pid" --skip-networking --log-error="$LOG/mariadb.err" \
	--max-connections=1000 --innodb-buffer-pool-size=256M --innodb-flush-log-at-trx-commit=0 \
	--innodb-doublewrite=0 --sync-binlog=0 --character-set-server=utf8mb4 \
	--collation-server=utf8mb4_general_ci
wait_for "MariaDB" 60 mariadb mariadb --no-defaults --socket="$SOCK" -uroot -e 'select 1'
sql() { mariadb --no-defaults --socket="$SOCK" -uroot -e "$1"; }
sql "CREATE USER 'osreal'@'localhost' IDENTIFIED BY '$DB_PASS'"
for db in keystone glance placement nova_api nova nova_cell0 neutron cinder; do
	sql "CREATE DATABASE $db; GRANT ALL PRIVILEGES ON $db.* TO 'osreal'@'localhost'"
done

# ------------------------------------------------------------------ RabbitMQ (127.0.0.1, own epmd)
mkdir -p "$state/lib/rabbitmq"
rabbit_env=(env HOME="$state/lib/rabbitmq" RABBITMQ_NODENAME=osreal@localhost
	RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=$P_RABBIT RABBITMQ_DIST_PORT=$P_RABBIT_DIST
	ERL_EPMD_PORT=$P_EPMD ERL_EPMD_ADDRESS=127.0.0.1
	RABBITMQ_MNESIA_BASE="$state/lib/rabbitmq/mnesia" RABBITMQ_LOG_BASE="$LOG/rabbitmq"
	RABBITMQ_PID_FILE="$state/lib/rabbitmq.pid" RABBITMQ_ENABLED_PLUGINS_FILE="$state/lib/rabbitmq/enabled_plugins"
	RABBITMQ_CONFIG_FILE="$state/etc/rabbitmq" RABBITMQ_ADVANCED_CONFIG_FILE="$state/etc/rabbitmq-advanced.config"
	RABBITMQ_CONF_ENV_FILE=/dev/null
	RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}")
echo "[]." >"$state/lib/rabbitmq/enabled_plugins"
echo "[]." >"$state/etc/rabbitmq-advanced.config"
printf 'loopback_users.guest = true\nlisteners.tcp.default = 127.0.0.1:%s\n' "$P_RABBIT" >"$state/etc/rabbitmq.conf"
start rabbitmq "${rabbit_env[@]}" /usr/lib/rabbitmq/bin/rabbitmq-server
wait_for "RabbitMQ on 127.0.0.1:$P_RABBIT" 120 rabbitmq bash -c "exec 3<>/dev/tcp/127.0.0.1/$P_RABBIT"

# ------------------------------------------------------------------ configuration
# auth SECTION: a keystoneauth password block of the service user (service project, roles admin
# and service: Cinder only trusts a service token whose user has the service role).
auth() {
	cat <<INI
[$1]
auth_url = $KS
auth_type = password
project_domain_name = Default
user_domain_name = Default
project_name = service
username = osreal-service
password = $SERVICE_PASS
region_name = $REGION
INI
}
authtoken() {
	auth keystone_authtoken
	cat <<INI
www_authenticate_uri = $KS
service_token_roles_required = false
memcached_servers =
# A revoked token is refused within 30 s (the token test); the default, 300 s, would make that
# test wait five minutes, and no caching at all doubles Keystone's load.
token_cache_time = 30
INI
}
common() {
	cat <<INI
[DEFAULT]
debug = false
use_stderr = true
transport_url = $TRANSPORT
[oslo_concurrency]
lock_path = $state/lib/locks
[oslo_messaging_notifications]
driver = noop
[oslo_policy]
enforce_new_defaults = false
INI
}
mkdir -p "$state/lib/locks" "$state/etc"/{keystone,glance,placement,nova,neutron,cinder}

cat >"$state/etc/keystone/keystone.conf" <<INI
[DEFAULT]
debug = false
use_stderr = true
[database]
connection = $(db_url keystone)
[token]
provider = fernet
expiration = $token_expiration
[fernet_tokens]
key_repository = $state/etc/keystone/fernet-keys
[fernet_receipts]
key_repository = $state/etc/keystone/fernet-keys
[credential]
key_repository = $state/etc/keystone/credential-keys
[cache]
enabled = false
[identity]
# bcrypt's minimum cost: every password token costs a hash, on two shared cores.
password_hash_rounds = 4
INI

{
	common
	cat <<INI
[DEFAULT]
bind_host = 127.0.0.1
bind_port = $P_GLANCE
workers = 1
enabled_backends = fs:file
[database]
connection = $(db_url glance)
[glance_store]
default_backend = fs
[fs]
filesystem_store_datadir = $state/lib/glance/images
[os_glance_staging_store]
filesystem_store_datadir = $state/lib/glance/staging
[os_glance_tasks_store]
filesystem_store_datadir = $state/lib/glance/tasks
[paste_deploy]
flavor = keystone
config_file = /etc/glance/glance-api-paste.ini
INI
	authtoken
} >"$state/etc/glance/glance-api.conf"

{
	common
	cat <<INI
[api]
auth_strategy = keystone
[placement_database]
connection = $(db_url placement)
INI
	authtoken
} >"$state/etc/placement/placement.conf"

{
	common
	cat <<INI
[DEFAULT]
# Neutron's ML2 "test" mechanism driver binds ports of this host without an agent.
host = host-ovs-filter-active
my_ip = 127.0.0.1
compute_driver = fake.FakeDriver
state_path = $state/lib/nova
instances_path = $state/lib/nova/instances
enabled_apis = osapi_compute
osapi_compute_listen = 127.0.0.1
osapi_compute_listen_port = $P_NOVA
osapi_compute_workers = 1
# The fake driver plugs nothing, so Neutron never sends network-vif-plugged.
vif_plugging_is_fatal = false
vif_plugging_timeout = 0
[api]
auth_strategy = keystone
[wsgi]
api_paste_config = /etc/nova/api-paste.ini
[api_database]
connection = $(db_url nova_api)
[database]
connection = $(db_url nova)
[conductor]
workers = 1
[scheduler]
workers = 1
discover_hosts_in_cells_interval = -1
[vnc]
enabled = false
[spice]
enabled = false
[glance]
region_name = $REGION
[cinder]
os_region_name = $REGION
INI
	authtoken
	auth placement
	auth neutron
	auth service_user
	echo "send_service_user_token = true"
} >"$state/etc/nova/nova.conf"
cp /etc/nova/api-paste.ini "$state/etc/nova/api-paste.ini"

{
	common
	cat <<INI
[DEFAULT]
bind_host = 127.0.0.1
bind_port = $P_NEUTRON
api_workers = 1
rpc_workers = 1
rpc_state_report_workers = 1
core_plugin = ml2
auth_strategy = keystone
state_path = $state/lib/neutron
api_paste_config = /etc/neutron/api-paste.ini
notify_nova_on_port_status_changes = true
notify_nova_on_port_data_changes = true
[database]
connection = $(db_url neutron)
[ml2]
type_drivers = flat,vlan,vxlan
tenant_network_types = vxlan
# Neutron's own test driver (neutron.tests.unit.plugins.ml2.drivers.mechanism_test): it binds a
# port on host "host-ovs-filter-active" as OVS with port filtering and marks it ACTIVE.
mechanism_drivers = test
extension_drivers = port_security
[ml2_type_vxlan]
vni_ranges = 1:1000
[securitygroup]
enable_security_group = true
INI
	authtoken
	auth nova
} >"$state/etc/neutron/neutron.conf"

{
	common
	cat <<INI
[DEFAULT]
osapi_volume_listen = 127.0.0.1
osapi_volume_listen_port = $P_CINDER
osapi_volume_workers = 1
auth_strategy = keystone
state_path = $state/lib/cinder
api_paste_config = /etc/cinder/api-paste.ini
rootwrap_config = /etc/cinder/rootwrap.conf
host = osreal
storage_availability_zone = $ZONE
default_availability_zone = $ZONE
enabled_backends = fake
default_volume_type = __DEFAULT__
glance_api_servers = http://127.0.0.1:$P_GLANCE
image_conversion_dir = $state/lib/cinder/conversion
[database]
connection = $(db_url cinder)
[fake]
# Cinder's fake backend (cinder.tests.fake_driver): its data path is LVM's, minus the LVM
# commands. Images are written to local_path = /dev/mapper/<volume_group>-<volume>, so the
# volume group name leads from /dev/mapper (created above where missing) into the state directory.
volume_driver = cinder.tests.fake_driver.FakeLoggingVolumeDriver
volume_backend_name = fake
volume_group = ../..$state/lib/cinder/volumes/vg
target_helper = fake
INI
	authtoken
	auth nova
} >"$state/etc/cinder/cinder.conf"
mkdir -p "$state/lib/cinder/volumes" "$state/lib/cinder/conversion" "$state/lib/nova/instances" "$state/lib/neutron" "$state/lib/glance"

# ------------------------------------------------------------------ Keystone (uwsgi)
ksm() { owned keystone-manage --config-file "$state/etc/keystone/keystone.conf" "$@" >>"$LOG/keystone-manage.log" 2>&1; }
log "Keystone: database, keys, bootstrap"
ksm db_sync
ksm fernet_setup --keystone-user root --keystone-group root
ksm credential_setup --keystone-user root --keystone-group root
ksm bootstrap --bootstrap-password "$ADMIN_PASS" --bootstrap-region-id $REGION \
	--bootstrap-admin-url "$KS/v3" --bootstrap-internal-url "$KS/v3" --bootstrap-public-url "$KS/v3"

# uwsgi_app NAME PORT SCRIPT ENV...: a uwsgi HTTP server of two single-threaded processes (Keystone
# under uwsgi threads crashes in greenlet: eventlet is imported). uwsgi's plain HTTP socket closes
# every connection after its answer; "Connection: close" says so, or clients that reuse the
# connection race the close and get "connection reset by peer".
uwsgi_app() {
	local name=$1 port=$2 script=$3
	shift 3
	start "$name" env "$@" uwsgi --plugin python3 --http-socket "127.0.0.1:$port" --wsgi-file "$script" \
		--master --processes 2 --threads 1 --die-on-term --need-app --lazy-apps --buffer-size 65535 \
		--hook-master-start "unix_signal:15 gracefully_kill_them_all" --thunder-lock \
		--add-header "Connection: close"
}
uwsgi_app keystone "$P_KEYSTONE" /usr/bin/keystone-wsgi-public \
	OS_KEYSTONE_CONFIG_DIR="$state/etc/keystone" OS_KEYSTONE_CONFIG_FILES=keystone.conf

# The database schemas of the other services, while Keystone starts.
log "database schemas"
owned glance-manage --config-file "$state/etc/glance/glance-api.conf" db_sync >"$LOG/glance-manage.log" 2>&1 &
db_glance=$!
owned placement-manage --config-file "$state/etc/placement/placement.conf" db sync >"$LOG/placement-manage.log" 2>&1 &
db_placement=$!
owned neutron-db-manage --config-file "$state/etc/neutron/neutron.conf" upgrade head >"$LOG/neutron-db-manage.log" 2>&1 &
db_neutron=$!
owned cinder-manage --config-file "$state/etc/cinder/cinder.conf" db sync >"$LOG/cinder-manage.log" 2>&1 &
db_cinder=$!
nm() { owned nova-manage --config-file "$state/etc/nova/nova.conf" "$@" >>"$LOG/nova-manage.log" 2>&1; }
(nm api_db sync && nm cell_v2 map_cell0 && nm cell_v2 create_cell --name cell1 && nm db sync) &
db_nova=$!
wait_for "Keystone on $KS" 60 keystone http_up "$KS/v3"

PROJECT=machinist
QUOTA_PROJECT=machinist-quota
MACHINIST_USER=machinist
QUOTA_INSTANCES=2
SECGROUP=shoot--foobar-openstack
KEYPAIR=shoot--foobar--openstack
IMAGE_NAME=ubuntu-24.04
VOLUME_TYPE=ssd
COMPUTE_HOST=host-ovs-filter-active
head -c 1048576 /dev/zero >"$state/lib/tiny.raw"
ssh-keygen -q -t ed25519 -N '' -C machinist-openstack-real -f "$state/lib/ssh-key"
# seed PHASE: runs seed.py and takes over the NAME=value lines it prints.
seed() {
	local out
	out=$(env SEED_AUTH_URL="$KS/v3" SEED_REGION="$REGION" SEED_ZONE="$ZONE" SEED_ADMIN_PASSWORD="$ADMIN_PASS" \
		SEED_SERVICE_PASSWORD="$SERVICE_PASS" SEED_USER="$MACHINIST_USER" SEED_USER_PASSWORD="$USER_PASS" \
		SEED_PROJECT="$PROJECT" SEED_QUOTA_PROJECT="$QUOTA_PROJECT" SEED_QUOTA_INSTANCES="$QUOTA_INSTANCES" \
		SEED_GLANCE_URL="http://127.0.0.1:$P_GLANCE" SEED_PLACEMENT_URL="http://127.0.0.1:$P_PLACEMENT" \
		SEED_NOVA_URL="http://127.0.0.1:$P_NOVA/v2.1" SEED_NEUTRON_URL="http://127.0.0.1:$P_NEUTRON" \
		SEED_CINDER_URL="http://127.0.0.1:$P_CINDER/v3/%(project_id)s" SEED_COMPUTE_HOST="$COMPUTE_HOST" \
		SEED_IMAGE_NAME="$IMAGE_NAME" SEED_IMAGE_FILE="$state/lib/tiny.raw" SEED_VOLUME_TYPE="$VOLUME_TYPE" \
		SEED_SECGROUP="$SECGROUP" SEED_KEYPAIR="$KEYPAIR" SEED_PUBLIC_KEY="$state/lib/ssh-key.pub" \
		OPENSTACK_REAL_OWNER="$OWNER" /usr/bin/python3 "$here/seed.py" "$1" 2>>"$LOG/seed.log") || { tail -n 30 "$LOG/seed.log" >&2; die "seed.py $1 failed"; }
	local line
	while IFS= read -r line; do
		case "$line" in
		[A-Z_]*=*) printf -v "${line%%=*}" '%s' "${line#*=}" ;;
		esac
	done <<<"$out"
}
log "Keystone: service user, catalog, projects, user, application credential"
seed identity

for pid in $db_glance $db_placement $db_neutron $db_cinder $db_nova; do
	wait "$pid" || die "a database migration failed: see $LOG/*-manage.log"
done

# ------------------------------------------------------------------ the services
uwsgi_app placement "$P_PLACEMENT" /usr/bin/placement-api OS_PLACEMENT_CONFIG_DIR="$state/etc/placement"
start glance glance-api --config-file "$state/etc/glance/glance-api.conf"
# python3 -O: the ML2 test driver asserts unit-test bookkeeping (ports it bound, kept per process;
# no original port on a bind) that does not hold in a server with several workers, and fails the
# binding with an AssertionError; without asserts it binds by host name, which is all we need.
start neutron /usr/bin/python3 -O /usr/bin/neutron-server --config-file "$state/etc/neutron/neutron.conf"
start nova-api nova-api --config-file "$state/etc/nova/nova.conf"
start nova-conductor nova-conductor --config-file "$state/etc/nova/nova.conf"
start nova-scheduler nova-scheduler --config-file "$state/etc/nova/nova.conf"
start cinder-api cinder-api --config-file "$state/etc/cinder/cinder.conf"
start cinder-scheduler cinder-scheduler --config-file "$state/etc/cinder/cinder.conf"
start cinder-volume cinder-volume --config-file "$state/etc/cinder/cinder.conf"
wait_for "Placement" 120 placement http_up "http://127.0.0.1:$P_PLACEMENT/"
start nova-compute nova-compute --config-file "$state/etc/nova/nova.conf"
wait_for "Glance" 120 glance http_up "http://127.0.0.1:$P_GLANCE/versions"
wait_for "Neutron" 180 neutron http_up "http://127.0.0.1:$P_NEUTRON/"
wait_for "Nova API" 180 nova-api http_up "http://127.0.0.1:$P_NOVA/"
wait_for "Cinder API" 180 cinder-api http_up "http://127.0.0.1:$P_CINDER/"

log "waiting for nova-compute and cinder-volume to report"
seed compute-up
nm cell_v2 discover_hosts --verbose

# ------------------------------------------------------------------ what the tests use
log "seeding: zone, flavors, image, volume type, quotas, networks, key pair"
seed cloud

versions() {
	local p v out=""
	for p in keystone glance-api placement-api nova-api nova-compute neutron-server cinder-volume \
		mariadb-server rabbitmq-server python3-keystone python3-nova python3-neutron python3-cinder python3-glance; do
		v=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || echo missing)
		out+="$p=$v "
	done
	echo "${out% }"
}
VERSIONS=$(versions)

cat >"$ENVF" <<VARS
OS_AUTH_URL=$KS/v3
OS_REGION_NAME=$REGION
OPENSTACK_REAL_STATE=$state
OSR_REGION=$REGION
OSR_ZONE=$ZONE
OSR_DOMAIN=Default
OSR_PROJECT=$PROJECT
OSR_PROJECT_ID=$PROJECT_ID
OSR_QUOTA_PROJECT=$QUOTA_PROJECT
OSR_QUOTA_PROJECT_ID=$QUOTA_PROJECT_ID
OSR_QUOTA_INSTANCES=$QUOTA_INSTANCES
OSR_USER=$MACHINIST_USER
OSR_PASSWORD=$USER_PASS
OSR_APPCRED_ID=$APPCRED_ID
OSR_APPCRED_SECRET=$APPCRED_SECRET
OSR_ADMIN_PASSWORD=$ADMIN_PASS
OSR_NETWORK_ID=$NETWORK_ID
OSR_SUBNET_ID=$SUBNET_ID
OSR_QUOTA_NETWORK_ID=$QUOTA_NETWORK_ID
OSR_QUOTA_SUBNET_ID=$QUOTA_SUBNET_ID
OSR_SECGROUP=$SECGROUP
OSR_KEYPAIR=$KEYPAIR
OSR_IMAGE_NAME=$IMAGE_NAME
OSR_IMAGE_ID=$IMAGE_ID
OSR_FLAVOR_SMALL=m1.small
OSR_FLAVOR_SAMPLE=m1.xmedium
OSR_FLAVOR_LARGE=m1.large
OSR_FLAVOR_NOHOST=m1.nohost
OSR_VOLUME_TYPE=$VOLUME_TYPE
OSR_TOKEN_EXPIRATION=$token_expiration
OSR_VERSIONS="$VERSIONS"
VARS
log "OpenStack is up in $(( $(date +%s) - started ))s: $VERSIONS"
log "environment: $ENVF"

if [ "$mode" = up ]; then
	log "running until interrupted (Ctrl-C stops everything)"
	while :; do
		sleep 3600 &
		wait $!
	done
fi
set +e
(
	set -a
	. "$ENVF"
	set +a
	export OPENSTACK_REAL_ENV=$ENVF
	exec env OPENSTACK_REAL_OWNER="$OWNER" "$@"
)
rc=$?
set -e
exit "$rc"
}
