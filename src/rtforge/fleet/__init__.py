"""A fleet of boards: the user's Ansible inventory names them, Ansible
orchestrates (forks, serial, max_fail_percentage, retries, --limit), rtforge
does each board's work through the collection shipped in
rtforge/ansible/ansible_collections/rtforge/rtforge.

    inventory   the inventory as Ansible reads it (ansible-inventory, ansible --list-hosts)
    settings    the rtforge_* variables of each board, checked with rtforge's own rules
    campaign    one fleet command's record: what each board came to, so a re-run resumes
    playbook    running the collection's playbooks and reading their events
    status      the boards' states from those events, the summary and the exit status
    evidence    a board's runs and records, for `rtforge fleet report`
"""
