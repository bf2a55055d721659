"""hpckit.lab.vm: virtual machines with their own kernel and systemd (qemu, software emulation).

spec = VmSpec(LabSpec("vmlab", (LabNode("ctl", "10.78.0.10"), LabNode("c1", "10.78.0.11")),
                      subnet="10.78.0.0/24", bridge="hpkvm0"), memory_mib={"ctl": 1536})
vm_up(spec)                      # builds the Debian 13 image once (cached), boots, waits for sshd
lab_exec("vmlab", "c1", ["systemctl", "is-system-running"])   # hpckit.lab's verbs work on VM labs
ssh_identity("vmlab")            # root's key and known_hosts, as for a namespace lab
lab_down("vmlab")                # no qemu, namespace, link or disk left
"""
