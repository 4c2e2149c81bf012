#!/usr/bin/python3
"""Seeds the OpenStack that openstack.sh brought up, through openstacksdk (Debian's
python3-openstacksdk, installed with the client): one process per phase instead of one
`openstack` command per object, which costs seconds each on a busy two-core machine.

  seed.py identity   service project and user, the service catalog, the test projects, user and
                     application credential
  seed.py compute-up waits until nova-compute and cinder-volume report (bounded)
  seed.py cloud      zone, flavors, image, volume type, quotas, networks, security groups, key pair

Each phase reads its settings from the environment (SEED_*) and prints shell assignments
(NAME=value) of what it made on stdout; openstack.sh evaluates them.
"""
import os
import sys
import time

import openstack

env = os.environ


def connect(user, password, project):
    return openstack.connect(
        auth_url=env["SEED_AUTH_URL"], username=user, password=password, project_name=project,
        user_domain_name="Default", project_domain_name="Default", region_name=env["SEED_REGION"],
        interface="public")


def out(**kw):
    for k, v in kw.items():
        print(f"{k}={v}")


def identity():
    conn = connect("admin", env["SEED_ADMIN_PASSWORD"], "admin")
    idn = conn.identity
    admin_role = idn.find_role("admin", ignore_missing=False)
    member_role = idn.find_role("member", ignore_missing=False)
    service = idn.create_project(name="service", domain_id="default")
    svc_user = idn.create_user(name="osreal-service", password=env["SEED_SERVICE_PASSWORD"], domain_id="default")
    idn.assign_project_role_to_user(service, svc_user, admin_role)
    # The "service" role marks the service token Nova sends with its calls to Cinder. Without it
    # Cinder (OSSA-2023-003, bug 2004555) treats Nova's attachment delete after a server delete as
    # a user's and asks Nova about the server with the user's token, which fails for a token of an
    # application credential (Keystone: "Using a delegated token to create another token is not
    # allowed"); the volume then stays in-use with no server.
    service_role = idn.find_role("service") or idn.create_role(name="service")
    idn.assign_project_role_to_user(service, svc_user, service_role)
    for stype, name, url in [
        ("image", "glance", env["SEED_GLANCE_URL"]),
        ("placement", "placement", env["SEED_PLACEMENT_URL"]),
        ("compute", "nova", env["SEED_NOVA_URL"]),
        ("network", "neutron", env["SEED_NEUTRON_URL"]),
        ("volumev3", "cinderv3", env["SEED_CINDER_URL"]),
        ("block-storage", "cinder", env["SEED_CINDER_URL"]),
    ]:
        svc = idn.create_service(name=name, type=stype)
        for iface in ("public", "internal", "admin"):
            idn.create_endpoint(service_id=svc.id, interface=iface, url=url, region_id=env["SEED_REGION"])

    projects = {}
    for name in (env["SEED_PROJECT"], env["SEED_QUOTA_PROJECT"]):
        projects[name] = idn.create_project(name=name, domain_id="default")
    user = idn.create_user(name=env["SEED_USER"], password=env["SEED_USER_PASSWORD"], domain_id="default")
    for p in projects.values():
        idn.assign_project_role_to_user(p, user, member_role)
    uconn = connect(env["SEED_USER"], env["SEED_USER_PASSWORD"], env["SEED_PROJECT"])
    cred = uconn.identity.create_application_credential(user=user.id, name="machinist-real")
    out(PROJECT_ID=projects[env["SEED_PROJECT"]].id,
        QUOTA_PROJECT_ID=projects[env["SEED_QUOTA_PROJECT"]].id,
        APPCRED_ID=cred.id, APPCRED_SECRET=cred.secret)


def compute_up():
    conn = connect("admin", env["SEED_ADMIN_PASSWORD"], "admin")
    deadline = time.monotonic() + 300
    while True:
        compute = [s for s in conn.compute.services() if s.binary == "nova-compute" and s.state == "up"]
        # openstacksdk 0.101 has no block-storage services call: ask Cinder's os-services.
        volume = [s for s in conn.block_storage.get("os-services").json()["services"]
                  if s["binary"] == "cinder-volume" and s["state"] == "up"]
        if compute and volume:
            return
        if time.monotonic() > deadline:
            sys.exit(f"seed: after 300s nova-compute up: {bool(compute)}, cinder-volume up: {bool(volume)}")
        time.sleep(1)


def cloud():
    conn = connect("admin", env["SEED_ADMIN_PASSWORD"], "admin")
    zone, host = env["SEED_ZONE"], env["SEED_COMPUTE_HOST"]
    agg = conn.compute.create_aggregate(name=zone, availability_zone=zone)
    conn.compute.add_host_to_aggregate(agg, host)
    conn.compute.create_flavor(name="m1.small", vcpus=1, ram=512, disk=1)
    conn.compute.create_flavor(name="m1.xmedium", vcpus=2, ram=4096, disk=20)
    conn.compute.create_flavor(name="m1.large", vcpus=4, ram=8192, disk=40)
    # More disk than the fake host has (600000 GB): Nova's scheduler finds no valid host. Disk
    # has no quota, so the request gets past the API to the scheduler.
    conn.compute.create_flavor(name="m1.nohost", vcpus=1, ram=512, disk=900000)
    image = conn.create_image(env["SEED_IMAGE_NAME"], filename=env["SEED_IMAGE_FILE"], disk_format="raw",
                              container_format="bare", visibility="public", wait=True)
    conn.block_storage.create_type(name=env["SEED_VOLUME_TYPE"], is_public=True)

    main = conn.identity.find_project(env["SEED_PROJECT"], ignore_missing=False)
    small = conn.identity.find_project(env["SEED_QUOTA_PROJECT"], ignore_missing=False)
    conn.set_compute_quotas(main.id, instances=100, cores=400, ram=2048000)
    conn.set_volume_quotas(main.id, volumes=100, gigabytes=100000)
    conn.set_network_quotas(main.id, port=500)
    conn.set_compute_quotas(small.id, instances=int(env["SEED_QUOTA_INSTANCES"]))

    nets = {}
    for prefix, project in (("", env["SEED_PROJECT"]), ("QUOTA_", env["SEED_QUOTA_PROJECT"])):
        uconn = connect(env["SEED_USER"], env["SEED_USER_PASSWORD"], project)
        net = uconn.network.create_network(name="shoot-nodes")
        sub = uconn.network.create_subnet(network_id=net.id, name="shoot-nodes", ip_version=4, cidr="10.250.0.0/16")
        uconn.network.create_security_group(name=env["SEED_SECGROUP"])
        nets[prefix + "NETWORK_ID"], nets[prefix + "SUBNET_ID"] = net.id, sub.id
        if not prefix:
            with open(env["SEED_PUBLIC_KEY"]) as f:
                uconn.compute.create_keypair(name=env["SEED_KEYPAIR"], public_key=f.read())
    out(IMAGE_ID=image.id, **nets)


{"identity": identity, "compute-up": compute_up, "cloud": cloud}[sys.argv[1]]()
