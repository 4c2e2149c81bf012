#!/usr/bin/env bash
# Installs Debian's OpenStack (bookworm: Zed) and its backing services with apt-get, without letting
# the packages start, configure or register anything: a policy-rc.d refuses every service start
# (restored afterwards), and debconf is preseeded so no package touches a database or Keystone.
# up.sh configures and runs the services itself, as plain processes under a state directory.
# Does nothing when everything is installed already.
set -euo pipefail

PACKAGES=(
	mariadb-server rabbitmq-server
	keystone glance-api placement-api
	nova-api nova-conductor nova-scheduler
	# nova-compute needs some hypervisor package; nova-compute-ironic is the one that pulls in no
	# libvirt daemon or qemu. The fake virt driver (compute_driver = fake.FakeDriver) is used.
	nova-compute nova-compute-ironic
	neutron-server
	cinder-api cinder-scheduler cinder-volume
	# openstacksdk (seed.py) and the openstack command, for looking around by hand.
	python3-openstackclient
)

missing=()
for p in "${PACKAGES[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || exit 0
echo ">> installing ${missing[*]} with apt-get"

if [ "$(id -u)" -ne 0 ]; then
	echo "openstack-real: installing packages needs root (run as root, or install ${missing[*]} first)" >&2
	exit 1
fi

# Refuse service starts from maintainer scripts for the duration of the install (invoke-rc.d asks
# /usr/sbin/policy-rc.d; 101 = action forbidden). A policy-rc.d that was already there is kept.
created_policy=
if [ ! -e /usr/sbin/policy-rc.d ]; then
	printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
	chmod 755 /usr/sbin/policy-rc.d
	created_policy=1
fi
cleanup() { [ -z "$created_policy" ] || rm -f /usr/sbin/policy-rc.d; }
trap cleanup EXIT

# openstack-pkg-tools asks whether to set up a database (dbconfig-common), Keystone endpoints and
# RabbitMQ; answer no to all, so the packages only drop their files.
{
	for pkg in keystone glance glance-api glance-common placement placement-api placement-common \
		nova nova-api nova-common neutron neutron-common neutron-api neutron-server \
		cinder cinder-api cinder-common; do
		echo "$pkg $pkg/configure_db boolean false"
		echo "$pkg $pkg/dbconfig-install boolean false"
		echo "$pkg $pkg/register-endpoint boolean false"
		echo "$pkg $pkg/configure_ksat boolean false"
		echo "$pkg $pkg/configure_rabbit boolean false"
	done
	echo "keystone keystone/create-admin-tenant boolean false"
} | debconf-set-selections

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}"
