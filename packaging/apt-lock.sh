# Sourced by every script of the suite's that runs apt-get (tests/deps.sh,
# packaging/apt-need.sh, tests/nvidia/fetch.sh): one lock, machine-wide,
# held over each apt-get, so that an install in the background
# (tests/deps.sh --start, beside the lints) and a later script's apt-get
# take turns; apt-get itself fails at once where dpkg's lock is held.
APT_LOCK=/var/lock/desi-gpu-map-apt.lock
# Waits for the lock (descriptor 7), which is held until the shell exits.
apt_lock() { exec 7>"$APT_LOCK" && flock 7; }
# Takes it only where it is free.
apt_lock_now() { exec 7>"$APT_LOCK" && flock -n 7; }
