"""sbatch templates: typed parameters, a Jinja environment that shell-quotes every value, submission.

    from hpckit.jobs.library import Library
    rendered = Library().get("torchrun").render({"nodes": "4", "script": "train.py"})
    from hpckit.jobs.submit import submit, transport_for
    from hpckit.slurm.jobs import Jobs
    done = submit(rendered, Jobs.on(transport_for("mycluster")), wait=True)

Templates live in sbatch_templates/ (see hpckit.jobs.library for the parameter header they carry).
"""
