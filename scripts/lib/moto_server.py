"""moto_server, with each SQS queue's message list changed only under the queue's own lock.

moto 5.2.5 serves requests on threads. It appends a sent message under the queue's lock, but
rebuilds the list without it on delete and removes dead-lettered messages in place on receive:
a message sent while another is being deleted can drop out of the queue, which SQS never does
(a soak's job then waits forever for a message its dispatch was told had been sent). Here a
delete and a receive take the same lock as a send; a receive still waits for messages without
holding it. Everything else is moto's own server: `python3 moto_server.py -H HOST -p PORT`.
"""

import sys

from moto.server import main
from moto.sqs import models

_delete_message = models.Queue.delete_message
_receive_message = models.SQSBackend.receive_message


def delete_message(self, receipt_handle):
    with self._messages_lock:
        return _delete_message(self, receipt_handle)


def receive_message(self, queue_name, *args, **kwargs):
    # The lock is a condition on a re-entrant lock: waiting for messages inside releases it.
    with self.get_queue(queue_name)._messages_lock:
        return _receive_message(self, queue_name, *args, **kwargs)


models.Queue.delete_message = delete_message
models.SQSBackend.receive_message = receive_message

if __name__ == "__main__":
    main(sys.argv[1:])
