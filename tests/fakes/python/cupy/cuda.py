"""Stand-in for cupy.cuda: `runtime.getDeviceCount()` counts the entries of
CUDA_VISIBLE_DEVICES (unset: none, as the tests never run without a list);
`Device(i).use()` records `i` in `used`."""

import os

used = None


class runtime:
    @staticmethod
    def getDeviceCount():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        return len([e for e in visible.split(",") if e])


class Device:
    def __init__(self, device=0):
        self.id = int(device)

    def use(self):
        global used
        count = runtime.getDeviceCount()
        if not 0 <= self.id < count:
            raise RuntimeError(f"invalid device ordinal {self.id} of {count}")
        used = self.id
