"""Time from launch to the first reply, two trees back to back.

``python bench/first_reply.py BEFORE_TREE AFTER_TREE``: each tree gets a fresh venv of
this interpreter (none of the machine's ``.pth`` files run; one ``.pth`` names the tree
and this interpreter's site-packages, for Twisted) with a ``stalkd`` console script as pip
writes it; ``stalkd`` and ``python -m twisted_stalk`` of both are launched in turn, byte
code cached, 10 times per round, and each round prints the medians.
"""
import os, site, socket, statistics, subprocess, sys, sysconfig, tempfile, time
def venv(tree, where):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", where], check=True)
    b = os.path.join(where, "bin"); py = os.path.join(b, "python")
    purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], check=True, capture_output=True, text=True).stdout.strip()
    paths = [tree] + site.getsitepackages() + [sysconfig.get_path("purelib")]
    open(os.path.join(purelib, "t.pth"), "w").write("".join(p + "\n" for p in dict.fromkeys(paths)))
    s = os.path.join(b, "stalkd")
    open(s, "w").write(f"#!{py}\nimport sys\nfrom twisted_stalk_cli.stalkd import main\nsys.exit(main())\n"); os.chmod(s, 0o755)
    return b
def free():
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); return s.getsockname()[1]
def first(cmd, env):
    port = free(); t = time.monotonic()
    p = subprocess.Popen(cmd + ["-l", "127.0.0.1", "-p", str(port)], stderr=subprocess.DEVNULL, env=env)
    while True:
        try: c = socket.create_connection(("127.0.0.1", port), timeout=5); break
        except OSError: time.sleep(0.001)
    c.sendall(b"list-tube-used\r\n"); assert c.recv(100) == b"USING default\r\n"
    d = time.monotonic() - t; c.close(); p.terminate(); p.wait(); return d
tmp = tempfile.mkdtemp()
env = dict(os.environ, PYTHONPYCACHEPREFIX=os.path.join(tmp, "pyc")); env.pop("PYTHONDONTWRITEBYTECODE", None); env.pop("PYTHONPATH", None)
bins = {"before": venv(sys.argv[1], os.path.join(tmp, "a")), "after": venv(sys.argv[2], os.path.join(tmp, "b"))}
cmds = {}
for k, b in bins.items():
    cmds[f"{k} stalkd"] = [os.path.join(b, "stalkd")]
    cmds[f"{k} -m"] = [os.path.join(b, "python"), "-m", "twisted_stalk"]
for c in cmds.values(): first(c, env)
for r in range(3):
    t = {k: [] for k in cmds}
    for _ in range(10):
        for k, c in cmds.items(): t[k].append(first(c, env))
    print(f"round {r+1}: " + ", ".join(f"{k} {1000*statistics.median(v):.0f} ms" for k, v in t.items()), flush=True)
