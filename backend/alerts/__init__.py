"""Alerts: rules over snapshots of the pipeline, their history, acknowledgement, mutes and
notifications (a Slack-compatible webhook, a command).

* :mod:`backend.alerts.model`: the small value snapshots the rules read, the thresholds, an alert.
* :mod:`backend.alerts.rules`: each rule a pure function of a snapshot and the thresholds.
* :mod:`backend.alerts.engine`: evaluates the rules, keeps the history in the state store
  (:mod:`state.alerts`), and notifies what newly fired.
* :mod:`backend.alerts.notify`: the webhook and command notifiers and their rate limit.

The snapshots are gathered from the other domains by :mod:`backend.flows.alerts`.
"""
