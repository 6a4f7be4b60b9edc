"""A host's root filesystem, made ready to boot: the overlay mounted, then the host's own
config written into it (root's SSH key, sshd's port, masked services, its identity)."""

from __future__ import annotations

import uuid
from pathlib import Path

from .host import TestHost
from .mounts import mount_overlay

#: Units of this image that must not run in a throwaway host, masked by a
#: /dev/null symlink in the host's /etc/systemd/system. The containers share
#: this machine's network, so anything binding a fixed port would collide
#: (with this machine or with the other hosts), and anything managing the
#: network would reconfigure this machine's. Periodic jobs are masked so they
#: cannot start in the middle of a test. Masking a unit that does not exist
#: is harmless.
MASKED_UNITS = (
    # Fixed ports: PostgreSQL (5432) and socket-activated ssh (22). Our sshd
    # runs as ssh.service on the host's own port instead.
    "postgresql.service",
    "postgresql@.service",
    "ssh.socket",
    # Debian's Prometheus server (9090) and node_exporter (9100): installed on this machine for
    # promtool and for the watch's e2e, which starts its own node_exporter on a port of its own.
    "prometheus.service",
    "prometheus-node-exporter.service",
    # Would manage the shared network / clock of this machine.
    "systemd-networkd.service",
    "systemd-networkd.socket",
    "systemd-networkd-wait-online.service",
    "systemd-resolved.service",
    "systemd-timesyncd.service",
    "systemd-time-wait-sync.service",
    # Periodic and boot-time housekeeping: slow, noisy, irrelevant here.
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    "man-db.timer",
    "packagekit.service",
)


def prepare(host: TestHost, key: Path) -> None:
    """Scratch folder, tmpfs + overlay mounts, and the host's own config.

    ``key`` is the testbed's private key: its ``.pub`` becomes root's only
    authorized key on the host.
    """
    mount_overlay(host.name, host.workdir / "upper", host.root, host._mounts)
    _configure_ssh(host.root, host.port, key)
    _mask_units(host.root)
    _configure_account(host.root, host.name)


def _configure_ssh(root: Path, port: int, key: Path) -> None:
    # Root logs in with the testbed's key only.
    ssh_dir = root / "root" / ".ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    ssh_dir.chmod(0o700)
    authorized = ssh_dir / "authorized_keys"
    authorized.write_text(Path(f"{key}.pub").read_text())
    authorized.chmod(0o600)
    # sshd on its own loopback port. sshd_config includes sshd_config.d/
    # before its own settings and the first value wins, so these stick.
    sshd_d = root / "etc" / "ssh" / "sshd_config.d"
    sshd_d.mkdir(parents=True, exist_ok=True)
    (sshd_d / "00-testbed.conf").write_text(
        "# Throwaway test host (sglang_deploy/simulator/testbed): loopback only, key login for root.\n"
        f"Port {port}\n"
        "ListenAddress 127.0.0.1\n"
        "PermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\n"
        "UseDNS no\n"
    )


def _mask_units(root: Path) -> None:
    # Services that would fight over ports or this machine's network.
    units = root / "etc" / "systemd" / "system"
    units.mkdir(parents=True, exist_ok=True)
    for unit in _units_to_mask():
        link = units / unit
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to("/dev/null")


def _units_to_mask() -> list[str]:
    units = list(MASKED_UNITS)
    # One postgresql@<version>-<cluster> instance per cluster of this image.
    for conf in sorted(Path("/etc/postgresql").glob("*/*/postgresql.conf")):
        units.append(f"postgresql@{conf.parent.parent.name}-{conf.parent.name}.service")
    return units


def _configure_account(root: Path, name: str) -> None:
    """A plain root account, and the host's own hostname and machine id."""
    # A plain Debian root account: this machine's own shell setup (pyenv, cargo on
    # PATH) would make `python3` on the test host this machine's toolchain, not the
    # distribution's, unlike a real GPU host.
    for dotfile in (".bashrc", ".profile"):
        skel = Path("/etc/skel") / dotfile
        (root / "root" / dotfile).write_text(skel.read_text() if skel.is_file() else "")
    # Identity: own hostname and machine id.
    (root / "etc" / "hostname").write_text(f"{name}\n")
    (root / "etc" / "machine-id").write_text(uuid.uuid4().hex + "\n")
    hosts_file = root / "etc" / "hosts"
    existing = hosts_file.read_text() if hosts_file.exists() else ""
    if existing and not existing.endswith("\n"):
        existing += "\n"
    hosts_file.write_text(existing + f"127.0.1.1\t{name}\n")
